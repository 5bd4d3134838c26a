"""Transact calls that fail inside one group commit are undone alone (issue 20).

A savepoint is a mark with an undo journal (gormes/events/write_batch.py), and on
SQLite its SAVEPOINT is sent only when the function runs SQL, inline projections
or not. Here many transact calls share one batch (the writer is held until all
are queued): the ones that raise leave no row and no version behind, whether
they ran SQL or only appended, and the others commit gap-free, their versions as
if the failed ones never ran; an inline projection sees each committed row once,
in order, and nothing of a failed call.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from gormes.events.jobs import JobLeaseRenewed
from gormes.events.sqlite import SQLiteEventStore


def event(i: int) -> JobLeaseRenewed:
    return JobLeaseRenewed(lock_token=f"t{i}", lock_until=i, at=i)


class Boom(Exception):
    pass


MIX = ["a", "f1", "b", "f2", "c", "f3", "d"]  # queued in this order (see `run_the_mix`)


async def run_the_mix(store: SQLiteEventStore) -> dict[str, Any]:
    """The transact calls below in one batch, behind one that holds the writer;
    then an append to `t`. Returns each call's result ("boom": it raised)."""
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
        calls = {"a": appends, "f1": appends_then_fails, "b": reads_and_appends,
                 "f2": reads_appends_then_fails, "c": appends, "f3": appends_then_fails,
                 "d": reads_and_appends}
        for name in MIX:
            fn = calls[name]
            nursery.start_soon(call, name, fn)
            await trio.testing.wait_all_tasks_blocked()  # queued in this order
        nursery.start_soon(store.append, "t", [event(9)], 0)  # `t` untouched by f1/f3
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    return outcomes


async def test_failed_transacts_in_one_batch_leave_nothing_and_the_rest_commit_in_order(tmp_path: Path):
    async with SQLiteEventStore.open(tmp_path / "sp.db") as store:
        outcomes = await run_the_mix(store)
        assert store.batches_committed == 2
        records = await store.read_all()
    assert outcomes == {"a": 1, "f1": "boom", "b": 1, "f2": "boom", "c": 3, "f3": "boom", "d": 3}
    assert [r.position for r in records] == list(range(1, len(records) + 1))
    assert [(r.stream, r.version) for r in records if r.stream == "s"] == [("s", v) for v in (1, 2, 3, 4)]
    assert [r.event.lock_until for r in records if r.stream == "s"] == [3, 4, 3, 4]
    assert [(r.stream, r.version) for r in records if r.stream == "t"] == [("t", 1)]


async def test_with_an_inline_projection_a_savepoint_is_sent_only_where_a_call_needs_one(tmp_path: Path):
    """A call that only appends, or reads before it appends, shares the batch's
    INSERT (no SAVEPOINT of its own) with an inline projection as without one. One
    whose own rows must go in before it reads gets its savepoint, and the
    projection's writes for them are undone with it when it raises. The
    projection sees every committed row exactly once and in order."""
    applied: list[int] = []

    def project(conn: Any, records: list[Any]) -> None:
        conn.executemany("INSERT INTO seen(position) VALUES (?)", [(r.position,) for r in records])
        applied.extend(r.position for r in records)

    def appends_reads_then_fails(tx: Any) -> None:
        tx.append("u", [event(5)])
        tx.read_stream("u")  # its own row goes in first, inside its savepoint
        raise Boom

    async with SQLiteEventStore.open(tmp_path / "inline.db") as store:
        def install(tx: Any) -> None:
            tx.execute("CREATE TABLE seen(position INTEGER PRIMARY KEY)")
            store.add_inline(project)

        await store.transact(install)
        statements: list[str] = []
        store.log.conn.set_trace_callback(statements.append)
        outcomes = await run_the_mix(store)
        mix_statements = list(statements)
        with pytest.raises(Boom):
            await store.transact(appends_reads_then_fails)
        store.log.conn.set_trace_callback(None)
        records = await store.read_all()
        seen = await store.read_sql(lambda conn: [r[0] for r in conn.execute("SELECT position FROM seen")])
    assert outcomes == {"a": 1, "f1": "boom", "b": 1, "f2": "boom", "c": 3, "f3": "boom", "d": 3}
    assert [r.position for r in records] == list(range(1, len(records) + 1))
    assert seen == [r.position for r in records]
    assert applied == [*seen, len(records) + 1]  # the failed call's row was projected, then undone
    assert not any(s.startswith("SAVEPOINT") for s in mix_statements)
    assert [s.split()[0] for s in statements[len(mix_statements):] if s.split()[0] in
            ("SAVEPOINT", "ROLLBACK", "RELEASE")] == ["SAVEPOINT", "ROLLBACK", "RELEASE"]
