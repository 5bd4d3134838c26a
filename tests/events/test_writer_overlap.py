"""Where the backend overlaps (SQLite without inline projections), the writer
starts the next commit before it wakes the last batch's callers, so that their
steps overlap it (decision 0052)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import trio
import trio.testing

from gormes.events.sqlite import SQLiteEventStore
from gormes.events.store_base import Changes, GroupCommitCalls, _Request, in_thread


class _Order(GroupCommitCalls):
    """A writer whose commits only note what happens, in order; the first commit
    waits for `release` so that a second batch can queue behind it."""

    readonly = False

    def __init__(self) -> None:
        self.inline = []
        self._init_group_commit()
        self._changes = Changes(poll_interval=60)
        self.notes: list[str] = []
        self.release = trio.Event()

    async def _commit_batch(self, requests: list[_Request], started: Any) -> None:
        names = ",".join(r.payload for r in requests)
        self.notes.append(f"commit {names}")
        started()
        if names == "a":
            await self.release.wait()
        await trio.testing.wait_all_tasks_blocked()  # a commit takes a while: the woken callers run
        for r in requests:
            r.result = r.payload

    def _overlaps(self) -> bool:
        return True

    def _close_connections(self) -> None:
        pass

    async def call(self, name: str) -> None:
        await self._submit("transact", name)
        self.notes.append(f"woke {name}")


async def test_a_batchs_callers_wake_once_the_next_commit_is_under_way() -> None:
    store = _Order()
    async with store._running(), trio.open_nursery() as nursery:
        nursery.start_soon(store.call, "a")
        await trio.testing.wait_all_tasks_blocked()  # "a" commits, held
        nursery.start_soon(store.call, "b")
        await trio.testing.wait_all_tasks_blocked()  # "b" queued behind it
        store.release.set()
    assert store.notes == ["commit a", "commit b", "woke a", "woke b"]


async def test_the_last_batchs_callers_are_woken_when_nothing_follows() -> None:
    store = _Order()
    store.release.set()
    async with store._running():
        await store.call("a")
        assert store.notes == ["commit a", "woke a"]


async def test_in_thread_calls_started_while_the_thread_works() -> None:
    started_seen: list[bool] = []
    said = threading.Event()

    def work(timeout: float) -> None:
        started_seen.append(said.wait(timeout))  # False only if `started` came after

    await in_thread(work, 10.0, said.set)
    assert started_seen == [True]


async def test_in_thread_raises_what_the_function_raised() -> None:
    def fail(_: None) -> None:
        raise ValueError("no")

    try:
        await in_thread(fail, None, lambda: None)
    except ValueError as exc:
        assert str(exc) == "no"
    else:  # pragma: no cover
        raise AssertionError("in_thread swallowed the error")


async def test_sqlite_overlaps_only_without_inline_projections(tmp_path: Path) -> None:
    async with SQLiteEventStore.open(tmp_path / "e.db") as store:
        assert store._overlaps()
        store.add_inline(lambda conn, records: None)
        assert not store._overlaps()
