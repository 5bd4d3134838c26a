"""Hear another process commit to a SQLite file at once, instead of polling for it.

A store waiting for the log to grow (an idle worker's claim loop, `tail --follow`,
a run waiting for an approval) used to ask `PRAGMA data_version` every 5 ms:
up to 5 ms of pickup latency, and 200 wake-ups a second in a daemon that does
nothing (8% of a core on this kind of machine). In WAL mode every commit, from
any process, writes its frames to the `-wal` file, and Linux's inotify reports
each such write on a file descriptor that trio can wait on. So the waiting side
watches the WAL file and reads `data_version` only when something was written.

The last frame of a commit is written (and fsynced) a moment before the commit
becomes visible to readers (SQLite then updates the WAL index in shared memory,
which inotify does not see), and one write heard may stand for several commits,
so a write heard is followed by a check at once and more after growing gaps
(`SETTLE_S`, about 60 ms in all: long after any commit on a loaded machine has
become visible); a write heard during a gap starts the round again. The polling is
kept, slower (`FALLBACK_POLL_S`), for what inotify cannot hear: a file on a
network filesystem written from another host, a platform without inotify
(the store then polls at its own interval, as before).

inotify-simple (a ctypes wrapper of the three system calls) is a Linux-only
dependency; elsewhere `watch_wal` answers None.
"""

from __future__ import annotations

import os
from pathlib import Path

import trio

try:  # Linux only: the package is installed there alone (pyproject's marker)
    from inotify_simple import INotify, flags
except (ImportError, AttributeError, OSError):  # pragma: no cover - not Linux
    INotify = None  # type: ignore[assignment,misc]

__all__ = ["FALLBACK_POLL_S", "SETTLE_S", "WalWatch", "watch_wal"]

FALLBACK_POLL_S = 0.25  # the poll kept beside the watch, for writes it cannot hear
SETTLE_S = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032)  # gaps between checks after a write


class WalWatch:
    """An inotify descriptor on one `-wal` file: `written()` returns after a write to it."""

    def __init__(self, inotify: INotify) -> None:
        self._inotify = inotify

    def drain(self) -> None:
        """Forget the writes heard so far (non-blocking)."""
        self._inotify.read(timeout=0)

    async def written(self) -> None:
        """Until the file is written (or was since the last `drain`)."""
        await trio.lowlevel.wait_readable(self._inotify.fileno())
        self.drain()

    def close(self) -> None:
        self._inotify.close()


def watch_wal(db_path: str | os.PathLike[str]) -> WalWatch | None:
    """A watch on `db_path`'s WAL file, or None where there is nothing to watch:
    no inotify here, an in-memory database, or no `-wal` file (not in WAL mode)."""
    if INotify is None or str(db_path) in ("", ":memory:"):
        return None
    wal = Path(f"{db_path}-wal")
    try:
        inotify = INotify(nonblocking=True)
    except OSError:  # out of inotify instances (fs.inotify.max_user_instances)
        return None
    try:
        inotify.add_watch(wal, flags.MODIFY)
    except OSError:  # no WAL file, or out of watches
        inotify.close()
        return None
    return WalWatch(inotify)
