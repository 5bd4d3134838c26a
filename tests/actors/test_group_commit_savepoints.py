"""Transact calls that fail inside one group commit are undone alone (issue 20).

A savepoint is a mark with an undo journal (gormes/events/write_batch.py), and on
SQLite its SAVEPOINT is sent only when the function runs SQL. Here many transact
calls share one batch (the writer is held until all are queued): the ones that
raise leave no row and no version behind, whether they ran SQL or only appended,
and the others commit gap-free, their versions as if the failed ones never ran.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import trio
import trio.testing

from gormes.events.jobs import JobLeaseRenewed
from gormes.events.sqlite import SQLiteEventStore


def event(i: int) -> JobLeaseRenewed:
    return JobLeaseRenewed(lock_token=f"t{i}", lock_until=i, at=i)


class Boom(Exception):
    pass


async def test_failed_transacts_in_one_batch_leave_nothing_and_the_rest_commit_in_order(tmp_path: Path):
    async with SQLiteEventStore.open(tmp_path / "sp.db") as store:
        gate = threading.Event()
        outcomes: dict[str, Any] = {}

        def hold(tx: Any) -> None:
            tx.append("held", [event(0)])
            gate.wait()

        def appends_then_fails(tx: Any) -> None:  # no SQL: a deferred savepoint
            tx.append("s", [event(1)])
            tx.append("t", [event(1)])
            raise Boom

        def reads_appends_then_fails(tx: Any) -> None:  # SQL: the savepoint is sent
            tx.read_stream("s")
            tx.append("s", [event(2)])
            raise Boom

        def appends(tx: Any) -> int:
            return tx.append("s", [event(3)], expected_version=tx.stream_version("s")).version

        def reads_and_appends(tx: Any) -> int:
            seen = len(tx.read_stream("s"))
            tx.append("s", [event(4)], expected_version=seen)
            return seen

        async def call(name: str, fn: Any) -> None:
            try:
                outcomes[name] = await store.transact(fn)
            except Boom:
                outcomes[name] = "boom"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.transact, hold)
            await trio.testing.wait_all_tasks_blocked()
            for i, (name, fn) in enumerate([
                ("a", appends), ("f1", appends_then_fails), ("b", reads_and_appends),
                ("f2", reads_appends_then_fails), ("c", appends), ("f3", appends_then_fails),
                ("d", reads_and_appends),
            ]):
                nursery.start_soon(call, name, fn)
                await trio.testing.wait_all_tasks_blocked()  # queued in this order
            nursery.start_soon(store.append, "t", [event(9)], 0)  # `t` untouched by f1/f3
            await trio.testing.wait_all_tasks_blocked()
            gate.set()
        assert store.batches_committed == 2
        records = await store.read_all()
    assert outcomes == {"a": 1, "f1": "boom", "b": 1, "f2": "boom", "c": 3, "f3": "boom", "d": 3}
    assert [r.position for r in records] == list(range(1, len(records) + 1))
    assert [(r.stream, r.version) for r in records if r.stream == "s"] == [("s", v) for v in (1, 2, 3, 4)]
    assert [r.event.lock_until for r in records if r.stream == "s"] == [3, 4, 3, 4]
    assert [(r.stream, r.version) for r in records if r.stream == "t"] == [("t", 1)]
