"""The gateways' refused calls, counted from the index the database keeps of them
(gormes/control/call_refusals.py, decision 0075), on both backends.

The refusals are made through the real path: the executor, with a gateway caller
and the call rate the MCP server gives it (`GatewayCallRate`), and a tiny limit.
The clock is the test's own, the store's too, so a record's `recorded_at` is
where the test put it. `gormes top` and `gormes doctor` read them as processes in
tests/mcp/test_mcp_call_rate_views.py.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import Clock, limited
from pg_helpers import backend_store, reopen_store

from gormes.control import call_refusals
from gormes.control.call_rate import KEY, GatewayCallRate, parse_call_rate, stated_rule
from gormes.control.rate_rules import RateRule
from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.audit_chain import append_sealed
from gormes.events.store import AppendRequest
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, CallRateLimited

BACKENDS = ["sqlite", "postgres"]
GATEWAY = Caller(trust="gateway", id="mcp:mallory")
OPERATOR = Caller(trust="operator", id="cli")
T0 = 1_800_000_000.0


async def calls(executor: Executor, n: int, caller: Caller = GATEWAY) -> tuple[int, int]:
    """`n` calls of `time.now`: (served, refused)."""
    served = refused = 0
    for _ in range(n):
        try:
            await executor.call("time.now", {}, caller)
            served += 1
        except CallRateLimited:
            refused += 1
    return served, refused


async def refusals_since(store: Any, since: float, cap: int | None = None) -> Any:
    return await store.read_sql(lambda conn: call_refusals.refusals(conn, since, cap))


async def indexed(store: Any) -> bool:
    return await store.read_sql(call_refusals.indexed)


def ordinary(n: int, at: float, trust: str = "operator", error: str | None = None) -> list[OperationAudited]:
    """`n` audit records that are not the call rate's refusals."""
    return [OperationAudited(operation="time.now", audit_kind="time", caller="cli", trust=trust, allowed=error is None,
                             outcome="ok" if error is None else "denied", error=error, duration_ms=0.1,
                             at=int(at * 1000)) for _ in range(n)]


async def append_ordinary(store: Any, n: int, at: float, **kwargs: Any) -> None:
    for start in range(0, n, 500):
        records = ordinary(min(500, n - start), at, **kwargs)
        await append_sealed(store, AppendRequest(audit_stream(int(at * 1000)), records))


# -- what is counted ------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_refusals_are_counted_with_the_first_the_latest_and_the_limit_they_state(backend, db_path: Path):
    clock = Clock(T0)
    async with backend_store(backend, db_path, clock=clock) as store:
        assert not await indexed(store)
        assert await refusals_since(store, 0.0) is None  # no index: nothing read, and said so
        executor = limited(store, "2req/60s", clock)
        assert await calls(executor, 2) == (2, 0)
        assert await indexed(store)  # made before the first limited call
        assert await refusals_since(store, 0.0) == call_refusals.Refusals(0, False)
        await append_ordinary(store, 5, clock.now)  # served calls and another refusal are not counted
        await append_ordinary(store, 2, clock.now, trust="gateway", error="OperationDenied: shell.run may not be run")
        clock.now += 5
        assert await calls(executor, 3) == (0, 3)
        clock.now += 10
        await calls(executor, 1, OPERATOR)  # never limited
        assert await calls(executor, 2) == (0, 2)
        found = await refusals_since(store, T0)
        assert (found.count, found.more, found.first_at, found.last_at, found.last_caller) == (
            5, False, T0 + 5, T0 + 15, GATEWAY.id)
        assert found.last_error.startswith("CallRateLimited: 'gateway' callers may make at most 2 calls a minute")
        assert stated_rule(found.last_error) == RateRule(pattern=KEY, requests=2, window_s=60.0)
        later = await refusals_since(store, T0 + 10)  # only those recorded after the time asked
        assert (later.count, later.first_at) == (2, T0 + 15)
        capped = await refusals_since(store, T0, cap=4)
        assert (capped.count, capped.more) == (4, True)
        assert await refusals_since(store, T0 + 15) == call_refusals.Refusals(0, False)


@pytest.mark.parametrize("rate", ["600rpm", "2req/60s", "20req/1s", "5req/500ms", "3req/120m", "1000000req/1440m"])
def test_a_refusals_line_states_its_setting(rate: str):
    rule = parse_call_rate(rate)
    assert rule is not None
    limit = GatewayCallRate(store=None, rule=rule)  # type: ignore[arg-type]
    line = f"CallRateLimited: {limit._refusal(12.0)}"
    assert stated_rule(line) == rule
    assert stated_rule("CallRateLimited: something else") is None
    assert stated_rule(None) is None


@pytest.mark.parametrize("backend", BACKENDS)
async def test_refusals_recorded_before_the_index_are_counted_once_it_is_made(backend, db_path: Path):
    """The database keeps the index for every writer: the refusals an older gormes
    recorded (no index then) are in it once a newer process makes it."""
    clock = Clock(T0)
    async with backend_store(backend, db_path, clock=clock) as store:
        assert await calls(limited(store, "1req/60s", clock), 4) == (1, 3)
        await store.transact(lambda tx: tx.execute(f"DROP INDEX {call_refusals.INDEX}"))
        assert await refusals_since(store, 0.0) is None
        async with reopen_store(store) as other:  # another process, of this gormes
            assert await calls(limited(other, "1req/60s", clock), 1) == (0, 1)
            assert await other.read_sql(call_refusals.indexed)
        assert (await refusals_since(store, 0.0)).count == 4


async def test_a_store_that_cannot_make_the_index_still_limits_every_call(db_path: Path, monkeypatch, caplog):
    """Counting refusals is not worth refusing calls: a failed build is one warning,
    the calls are limited as before, and the readers say they cannot count."""
    def refuse(tx: Any) -> None:
        raise RuntimeError("permission denied for table events")

    monkeypatch.setattr(call_refusals, "create_index", refuse)
    clock = Clock(T0)
    async with backend_store("sqlite", db_path, clock=clock) as store:
        with caplog.at_level(logging.WARNING, logger="gormes.control"):
            assert await calls(limited(store, "2req/60s", clock), 5) == (2, 3)
        assert await refusals_since(store, 0.0) is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "gormes.control"]
    assert len(warnings) == 1 and "permission denied for table events" in warnings[0], warnings


# -- what a read costs ------------------------------------------------------------------------


def plan(conn: Any, sql: str, params: tuple) -> str:
    if getattr(conn, "dialect", "sqlite") == "postgres":
        return "\n".join(row[0] for row in conn.execute(f"EXPLAIN {sql}", params).fetchall())
    return "\n".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall())


@pytest.mark.parametrize("backend", BACKENDS)
async def test_each_read_is_a_range_of_the_index_not_a_scan_of_the_log(backend, db_path: Path):
    """Among 6,000 other audit records, the count, the first and the latest refusal
    are each read from `events_call_refused`, as the database plans them (PostgreSQL
    with the statistics ANALYZE gives it, as autovacuum would)."""
    clock = Clock(T0)
    async with backend_store(backend, db_path, clock=clock) as store:
        await append_ordinary(store, 6000, clock.now)
        await calls(limited(store, "1req/60s", clock), 4)
        dialect = store.dialect if backend == "postgres" else "sqlite"

        def plans(tx: Any) -> list[str]:
            if backend == "postgres":
                tx.execute("ANALYZE events")
            return [plan(tx.conn, call_refusals.counting_sql(dialect), (T0 - 1, 11)),
                    plan(tx.conn, call_refusals.first_sql(dialect), (T0 - 1,)),
                    plan(tx.conn, call_refusals.latest_sql(dialect), (T0 - 1,))]

        for found in await store.transact(plans):
            assert call_refusals.INDEX in found, found
            if backend == "sqlite":
                assert "SCAN events" not in found and "USING INDEX events_call_refused (recorded_at>?)" in found
            else:
                assert "Seq Scan" not in found and "Index Cond: (recorded_at >" in found, found
        assert (await refusals_since(store, T0 - 1)).count == 3
