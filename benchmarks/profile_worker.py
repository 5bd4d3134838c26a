"""Run a command of the gormes CLI under cProfile, its writer threads included.

    python benchmarks/profile_worker.py OUT.prof --db DB worker --import H ...

`python -m cProfile` profiles the main thread only, and a gormes worker spends
much of its CPU in the store's writer thread (every commit, claim and
completion runs there, through `trio.to_thread.run_sync`, or through
`trio.lowlevel.start_thread_soon` on a store that overlaps its commits, decision
0052). This wrapper profiles the main thread as cProfile would and every call
handed to either with one profiler per thread, then writes both into OUT.prof
(the threads' stats added to the main thread's) when the process exits (the
worker stops on SIGINT). Used by benchmarks/jobs.py.
"""

from __future__ import annotations

import atexit
import cProfile
import pstats
import sys
import threading

import trio
import trio.lowlevel
import trio.to_thread

_profiles: dict[int, cProfile.Profile] = {}
_run_sync = trio.to_thread.run_sync
_start_thread_soon = trio.lowlevel.start_thread_soon


def _profiled(fn):  # type: ignore[no-untyped-def]
    def profiled(*args):  # type: ignore[no-untyped-def]
        profile = _profiles.setdefault(threading.get_ident(), cProfile.Profile())
        profile.enable()
        try:
            return fn(*args)
        finally:
            profile.disable()

    return profiled


async def _profiled_run_sync(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    return await _run_sync(_profiled(fn), *args, **kwargs)


def _profiled_start_thread_soon(fn, deliver, name=None):  # type: ignore[no-untyped-def]
    return _start_thread_soon(_profiled(fn), deliver, name=name)


def main() -> None:
    out, args = sys.argv[1], sys.argv[2:]
    trio.to_thread.run_sync = _profiled_run_sync  # type: ignore[assignment]
    # the SQLite store's writer hands its commits to a thread with this (`store_base.in_thread`),
    # which takes its reference when gormes is imported, below
    trio.lowlevel.start_thread_soon = _profiled_start_thread_soon  # type: ignore[assignment]
    main_profile = cProfile.Profile()

    def dump() -> None:
        main_profile.disable()
        stats = pstats.Stats(main_profile)
        for profile in _profiles.values():
            stats.add(profile)
        stats.dump_stats(out)

    atexit.register(dump)
    sys.argv = ["gormes", *args]
    main_profile.enable()
    from gormes.cli.main import main as cli

    try:
        cli()
    except SystemExit:
        pass


if __name__ == "__main__":
    main()
