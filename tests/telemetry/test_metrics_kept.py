"""`/metrics`' log counters kept in the database (decision 0084), on both backends.

A collector started over a database where another kept its fold takes it up: its
counters are those of a collector that folded the whole log, and it reads only
the rows after the kept position (a row deleted below it outside gormes changes
nothing, where a fold from position 0 would count one attempt fewer). A kept
state past the log's head, unreadable, or priced with another pricing table is
not taken up; a store that cannot write keeps nothing and says so quietly.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pg_helpers import admin, backend_store

from gormes.actors.jobs.queue import JobQueue
from gormes.events import kept_fold
from gormes.events.jsonl import import_lines_in, parse_lines
from gormes.events.sqlite import SQLiteEventStore
from gormes.providers.pricing import Price, PricingTable, load_table
from gormes.telemetry.metrics import KEEP_ROW, KEEP_TABLE, FoldState, LogMetrics, Snapshot

FIXTURES = Path(__file__).resolve().parents[2] / "replay_fixtures"


async def _import(store: Any, name: str) -> None:
    lines = parse_lines((FIXTURES / f"{name}.jsonl").read_text().splitlines())
    await store.transact(lambda tx: import_lines_in(tx, lines))
    await JobQueue.open(store)  # the ledger a scrape reads


async def _attempts(queue: JobQueue, n: int) -> None:
    for _ in range(n):
        await queue.submit("echo", {})
        await queue.claim({"echo"}, worker_id="w-1")


def _counters(snap: Snapshot) -> tuple[int, int, dict[str, Any]]:
    return snap.attempts, snap.stalls, snap.by_model


def _raw(store: Any, statement: str, params: tuple = ()) -> None:
    """A statement on the database outside gormes (as an operator's client would)."""
    if getattr(store, "dialect", "sqlite") == "postgres":
        admin(f'SET search_path TO "{store.schema}"; ' + statement.replace("?", "%s"), params)
        return
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        conn.execute(statement, params)
    finally:
        conn.close()


def _kept_row(store: Any) -> Any:
    return store.read_sql(lambda conn: kept_fold.read(conn, KEEP_TABLE, KEEP_ROW))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_restarted_collector_counts_what_one_that_folded_everything_does(backend: str, db_path: Path):
    async with backend_store(backend, db_path) as store:
        await _import(store, "subagents")
        queue = await JobQueue.open(store)
        await _attempts(queue, 3)
        whole = LogMetrics(store)
        await whole.prepare()
        first = await whole.snapshot()
        assert first.attempts == 3 and first.by_model["scripted"].turns == 6
        assert await whole.keep() is True
        assert await whole.keep() is False  # the fold did not move: nothing written again
        kept_at = whole.folded
        assert (await _kept_row(store))[0] == kept_at == await store.head()

        await _import(store, "tool_error")  # more turns and attempts after the kept position
        await _attempts(queue, 2)
        # an attempt below the kept position deleted outside gormes: read again, it would be missing
        _raw(store, "DELETE FROM events WHERE position = (SELECT min(position) FROM events"
                    " WHERE type = 'job.claimed')")

        restarted = LogMetrics(store)
        await restarted.prepare()
        assert restarted.folded == kept_at  # it goes on from there
        again = await restarted.snapshot()
        reference = await whole.snapshot()  # folded everything, the first part before the deletion
        assert _counters(again) == _counters(reference)
        assert again.attempts == 5 and again.by_model["scripted"].turns == 6 + 3
        assert restarted.folded == whole.folded == await store.head()

        # the same log folded from position 0 (nothing kept) counts one attempt fewer: the
        # restarted collector did not read the rows below the kept position
        _raw(store, f"DELETE FROM {KEEP_TABLE}")
        assert (await LogMetrics(store).snapshot()).attempts == 4


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_kept_state_not_of_this_log_or_this_pricing_is_not_taken_up(backend: str, db_path: Path):
    async with backend_store(backend, db_path) as store:
        await _import(store, "subagents")
        fresh = await LogMetrics(store).snapshot()
        head = await store.head()
        pricing = load_table()

        async def kept(position: int, state: str) -> Snapshot:
            await store.transact(lambda tx: kept_fold.write(tx, KEEP_TABLE, KEEP_ROW, position, state))
            collector = LogMetrics(store, pricing=pricing)
            await collector.prepare()
            return await collector.snapshot()

        wrong = FoldState(position=head, attempts=1000, pricing=pricing.version)
        # as it is: taken up (so the cases below are refused for their own reason)
        assert (await kept(head, msgspec.json.encode(wrong).decode())).attempts == 1000
        past = FoldState(position=head + 100, attempts=1000, pricing=pricing.version)
        other = FoldState(position=head, attempts=1000, pricing=pricing.version + "+other")
        for state in (msgspec.json.encode(past).decode(), msgspec.json.encode(other).decode(), "{not json",
                      '{"position": "x"}'):
            assert _counters(await kept(head, state)) == _counters(fresh), state


async def test_a_store_that_cannot_write_keeps_nothing_quietly(db_path: Path):
    async with SQLiteEventStore.open(db_path) as store:
        await _import(store, "subagents")
    async with SQLiteEventStore.open(db_path, readonly=True) as store:
        collector = LogMetrics(store)
        await collector.prepare()
        assert (await collector.snapshot()).by_model["scripted"].turns == 6
        assert await collector.keep() is False
        assert await _kept_row(store) is None


async def test_costs_are_kept_as_priced(db_path: Path):
    table = PricingTable({"scripted": Price(input=1.0, output=2.0)}, version="test-1")
    async with SQLiteEventStore.open(db_path) as store:
        await _import(store, "subagents")
        whole = LogMetrics(store, pricing=table)
        cost = (await whole.snapshot()).by_model["scripted"].cost
        assert cost > 0 and await whole.keep()
        await _import(store, "tool_error")
        restarted = LogMetrics(store, pricing=table)
        await restarted.prepare()
        assert _counters(await restarted.snapshot()) == _counters(await whole.snapshot())
