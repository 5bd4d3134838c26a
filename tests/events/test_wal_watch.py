"""Another process's commits heard on the WAL file (gormes/events/wal_watch.py).

Each store here polls once an hour, so only the watch can wake it: a waiter that
wakes heard the other process's commit through inotify. The other process is a
real `python` appending through its own SQLiteEventStore. The `fail_after` guards
only keep a broken watch from hanging the suite; nothing is timed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from gormes.events.notes import NoteAdded
from gormes.events.sqlite import SQLiteEventStore
from gormes.events.store import Transaction
from gormes.events.wal_watch import INotify, watch_wal

pytestmark = pytest.mark.skipif(INotify is None, reason="inotify is Linux only")

HOUR = 3600.0
REPO = Path(__file__).resolve().parents[2]

APPENDER = textwrap.dedent("""
    import sys, trio
    from gormes.events.notes import NoteAdded
    from gormes.events.sqlite import SQLiteEventStore

    async def main(path, n):
        async with SQLiteEventStore.open(path) as store:
            for i in range(n):
                await store.append("other", [NoteAdded(text=str(i))])

    trio.run(main, sys.argv[1], int(sys.argv[2]))
""")


def note(text: str) -> NoteAdded:
    return NoteAdded(text=text)


async def other_at(store: SQLiteEventStore, n: int) -> None:
    """Wait until stream "other" is at version `n`, woken only by the store's change
    counter. The generation is read before each check, not after: a commit heard
    between the check and the wait would otherwise be slept through (with the poll
    off, for good, once it is the burst's last)."""
    while True:
        seen = store.generation
        if await store.stream_version("other") >= n:
            return
        await store.wait_for_change(seen)


def append_from_another_process(db: Path, n: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", APPENDER, str(db), str(n)], cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


async def test_a_waiter_wakes_on_another_process_s_commit_with_polling_off(tmp_path):
    db = tmp_path / "w.db"
    async with SQLiteEventStore.open(db, poll_interval=HOUR) as store:
        await store.append("mine", [note('mine')])
        proc = append_from_another_process(db, 1)
        with trio.fail_after(60):
            await other_at(store, 1)
        await trio.to_thread.run_sync(proc.wait)
        assert proc.returncode == 0
        assert await store.stream_version("other") == 1


async def test_every_commit_of_a_burst_is_heard(tmp_path):
    db = tmp_path / "w.db"
    n = 200
    async with SQLiteEventStore.open(db, poll_interval=HOUR) as store:
        await store.append("mine", [note('mine')])
        proc = append_from_another_process(db, n)
        with trio.fail_after(120):
            await other_at(store, n)
        await trio.to_thread.run_sync(proc.wait)
        assert await store.stream_version("other") == n


async def test_nobody_waiting_means_no_checks_however_much_is_written(tmp_path, monkeypatch):
    db = tmp_path / "w.db"
    async with SQLiteEventStore.open(db, poll_interval=HOUR) as store:
        checks = 0
        real_poll = store._changes.poll

        async def counted() -> None:
            nonlocal checks
            checks += 1
            await real_poll()

        monkeypatch.setattr(store._changes, "poll", counted)
        proc = append_from_another_process(db, 50)
        await trio.to_thread.run_sync(proc.wait)
        assert proc.returncode == 0
        await trio.sleep(0.1)  # let the watch task run, were it going to
        assert checks == 0
        with trio.fail_after(60):  # the writes made meanwhile are seen by the next waiter
            seen = store.generation
            await store.wait_for_change(seen)
        assert checks >= 1
        assert await store.stream_version("other") == 50


def test_nothing_to_watch_without_a_wal_file(tmp_path):
    assert watch_wal(":memory:") is None
    assert watch_wal(tmp_path / "never-opened.db") is None


async def test_the_store_s_own_commits_wake_its_followers_once_each(tmp_path):
    # The watch hears this store's own commits written to the WAL file too; the
    # writer's bump after each commit is the only wake-up they may cause.
    db = tmp_path / "w.db"
    async with SQLiteEventStore.open(db, poll_interval=HOUR) as store:
        async def follower() -> None:
            while True:
                await store.wait_for_change(store.generation)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follower)
            await trio.testing.wait_all_tasks_blocked()
            generation, commits = store.generation, store.batches_committed
            for i in range(30):
                await store.append("mine", [note(str(i))])
                await trio.sleep(0.005)  # let the watch hear each commit, and settle
            await trio.sleep(0.2)
            assert store.batches_committed - commits == 30
            assert store.generation - generation == 30
            nursery.cancel_scope.cancel()


async def test_another_process_s_commit_queued_behind_our_own_is_heard(tmp_path):
    # While the store's own commit is being made, the watch leaves the checks to
    # the commit's end; a commit another process makes right after it (it waited
    # for the write lock ours held) must still wake a waiter, with polling off.
    db = tmp_path / "w.db"
    async with SQLiteEventStore.open(db, poll_interval=HOUR) as store:
        await store.append("mine", [note("first")])
        release, holding = threading.Event(), threading.Event()

        def hold(tx: Transaction) -> None:
            tx.append("mine", [note("held")])
            holding.set()
            release.wait(60)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.transact, hold)
            await trio.to_thread.run_sync(holding.wait)
            proc = append_from_another_process(db, 1)
            await trio.sleep(0.5)  # most likely waiting for our write lock by now
            release.set()
            with trio.fail_after(60):
                await other_at(store, 1)
        await trio.to_thread.run_sync(proc.wait)
        assert proc.returncode == 0
