"""`/metrics` counts the gateways' calls the call rate refused (decision 0079), on
SQLite and PostgreSQL: refusals made through the executor with the call rate the
MCP server gives it (`GatewayCallRate`, a tiny limit), scraped over HTTP from
`MetricsServer` and parsed with prometheus-client's own parser. The counter
begins with the daemon (`LogMetrics.prepare`), counts each refusal once across
scrapes, and nothing else; it reads the index of the refusals, a range of it,
not the log. The daemon and `gormes mcp` as processes: tests/mcp/test_mcp_call_rate_views.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trio
from gateway_helpers import Clock, limited
from pg_helpers import backend_store
from test_metrics_scrape import scrape

from gormes.actors.jobs.queue import JobQueue
from gormes.control import call_refusals
from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.audit_chain import append_sealed
from gormes.events.postgres import PostgresEventStore
from gormes.events.sqlite import SQLiteEventStore
from gormes.events.store import AppendRequest
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, CallRateLimited
from gormes.telemetry.metrics import LogMetrics, MetricsServer

BACKENDS = ["sqlite", "postgres"]
COUNTER = "gormes_gateway_call_rate_refusals_total"
GATEWAY = Caller(trust="gateway", id="mcp:mallory")
OPERATOR = Caller(trust="operator", id="cli")


async def refused(executor: Executor, n: int, caller: Caller = GATEWAY) -> int:
    """`n` calls of `time.now`: how many the call rate refused."""
    count = 0
    for _ in range(n):
        try:
            await executor.call("time.now", {}, caller)
        except CallRateLimited:
            count += 1
    return count


async def other_records(store: Any, n: int, at: float) -> None:
    """Audit records that are not the call rate's refusals: served calls, and a
    gateway's other refusals."""
    records = [OperationAudited(operation="shell.run", audit_kind="shell", caller=GATEWAY.id, trust="gateway",
                                allowed=False, outcome="denied", error="OperationDenied: shell.run may not be run",
                                duration_ms=0.1, at=int(at * 1000)) if i % 2 else
               OperationAudited(operation="time.now", audit_kind="time", caller="cli", trust="operator",
                                allowed=True, outcome="ok", duration_ms=0.1, at=int(at * 1000))
               for i in range(n)]
    for start in range(0, n, 500):
        await append_sealed(store, AppendRequest(audit_stream(int(at * 1000)), records[start:start + 500]))


async def counter(port: int) -> tuple[float | None, float | None]:
    """The counter's value and its `_created`, as one scrape says them (None: not there)."""
    samples = await trio.to_thread.run_sync(scrape, port)
    value = [s.value for s in samples.get(COUNTER, [])]
    created = [s.value for s in samples.get("gormes_gateway_call_rate_refusals_created", [])]
    assert len(value) <= 1 and len(created) == len(value), samples.get(COUNTER)
    return (value[0], created[0]) if value else (None, None)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_refusals_recorded_since_the_daemon_began_are_counted_once(backend: str, db_path: Path):
    clock = Clock(time.time())
    async with backend_store(backend, db_path, clock=clock) as store:
        executor = limited(store, "2req/60s", clock)
        assert await refused(executor, 5) == 3  # before the daemon: not its to count
        await JobQueue.open(store)  # the ledger the daemon keeps, which a scrape reads too
        metrics = LogMetrics(store)
        began = time.time()
        await metrics.prepare()
        server = MetricsServer(metrics, 0)
        try:
            value, created = await counter(server.port)
            assert value == 0 and created is not None and began <= created <= time.time()
            clock.now += 1
            assert await refused(executor, 4) == 4
            await other_records(store, 10, clock.now)
            await refused(executor, 3, OPERATOR)  # never limited
            assert (await counter(server.port))[0] == 4
            assert (await counter(server.port))[0] == 4  # a scrape counts only what came after the last
            clock.now -= 5  # a refusal stamped by a clock a few seconds behind: still counted, once
            assert await refused(executor, 1) == 1
            clock.now += 10
            assert await refused(executor, 2) == 2
            assert (await counter(server.port))[0] == 7
            assert (await counter(server.port)) == (7, created)
        finally:
            server.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_without_the_index_the_counter_is_left_out_until_one_is_made(backend: str, db_path: Path):
    """A database where no gateway was limited has no refusal: 0. Where calls are
    limited but the index is missing (a store that could not make it), the refusals
    cannot be counted: the counter is left out, not shown as 0; once an index is
    made, the refusals recorded meanwhile are counted."""
    clock = Clock(time.time())
    async with backend_store(backend, db_path, clock=clock) as store:
        await JobQueue.open(store)  # the ledger the daemon keeps, which a scrape reads too
        metrics = LogMetrics(store)
        await metrics.prepare()
        server = MetricsServer(metrics, 0)
        try:
            assert (await counter(server.port))[0] == 0  # nothing limited here: nothing refused
            executor = limited(store, "1req/60s", clock)
            assert await refused(executor, 3) == 2
            assert (await counter(server.port))[0] == 2
            await store.transact(lambda tx: tx.execute(f"DROP INDEX {call_refusals.INDEX}"))
            assert await refused(executor, 2) == 2  # this process made it once, and does not again
            assert (await counter(server.port))[0] is None
            async with reopened(store, clock) as second:  # another process: it makes the index
                assert await refused(limited(second, "1req/60s", clock), 1) == 1
            assert (await counter(server.port))[0] == 5
        finally:
            server.close()


def reopened(store: Any, clock: Clock) -> Any:
    """Another store on the same database, as a second process opens it, on the test's clock."""
    if backend_of(store) == "postgres":
        return PostgresEventStore.open(store.url, schema=store.schema, poll_interval=0.05, clock=clock)
    return SQLiteEventStore.open(store.path, clock=clock)


def backend_of(store: Any) -> str:
    return getattr(store, "dialect", "sqlite")


def plan(conn: Any, sql: str, params: tuple) -> str:
    if getattr(conn, "dialect", "sqlite") == "postgres":
        return "\n".join(row[0] for row in conn.execute(f"EXPLAIN {sql}", params).fetchall())
    return "\n".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall())


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_scrape_reads_a_range_of_the_index_not_the_log(backend: str, db_path: Path):
    """Among 6,000 other audit records, the count of the refusals after a position is
    a range of `events_call_refused` by time, not the primary key's range of every
    row since that position nor a scan (PostgreSQL with ANALYZE's statistics)."""
    clock = Clock(time.time())
    async with backend_store(backend, db_path, clock=clock) as store:
        start = await store.read_sql(call_refusals.head)
        await other_records(store, 6000, clock.now)
        assert await refused(limited(store, "1req/60s", clock), 4) == 3
        dialect = store.dialect if backend == "postgres" else "sqlite"

        def read(tx: Any) -> tuple[str, int | None]:
            if backend == "postgres":
                tx.execute("ANALYZE events")
            up_to = call_refusals.head(tx.conn).position
            params = (clock.now - 20, start.position, up_to)
            return (plan(tx.conn, call_refusals.after_sql(dialect), params),
                    call_refusals.refused_after(tx.conn, *params[1:], params[0]))

        found, counted = await store.transact(read)
        assert counted == 3
        assert call_refusals.INDEX in found, found
        if backend == "sqlite":
            assert "SCAN events" not in found and "INDEX events_call_refused (recorded_at>?)" in found, found
        else:
            assert "Seq Scan" not in found and "Index Cond: (recorded_at >=" in found, found
