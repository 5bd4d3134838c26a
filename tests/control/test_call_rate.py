"""The gateways' call rate (`GORMES_GATEWAY_RATE`, gormes/control/call_rate.py,
decision 0072) through the executor, on both backends: the setting, the window,
who is limited, what a refusal leaves, and the lease rows it keeps.

The clock is a test's own (the limiter reads it in the store's writer thread), so
the windows move when a test says. The attacks through `gormes mcp` processes are
in tests/security/test_attack_gateway_rate.py.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from gateway_helpers import outcomes_at_once
from pg_helpers import backend_store, reopen_store

from gormes.actors.jobs.queue import JobQueue
from gormes.control import call_floods
from gormes.control import limits_table as table
from gormes.control.call_rate import (
    DEFAULT_GATEWAY_RATE, KEY, MIN_FLOOD, GatewayCallRate, call_rate_from_env, parse_call_rate,
)
from gormes.control.rate_rules import InvalidRateLimit, RateRule
from gormes.ops.executor import Executor
from gormes.ops.registry import Registry
from gormes.ops.spec import Caller, CallRateLimited, OperationDenied, OperationSpec
from gormes.tools.builtin import default_registry

BACKENDS = ["sqlite", "postgres"]
GATEWAY = Caller(trust="gateway", id="mcp:mallory")
OTHERS = [
    Caller(trust="operator", id="cli"),
    Caller(trust="system", id="cron:nightly"),
    Caller(trust="gateway", id="run-1", run_id="run-1"),  # a run acting for a gateway
    Caller(trust="child-agent", id="run-2", run_id="run-2"),
]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class Counted(msgspec.Struct):
    n: int = 0


def counting_registry(ran: list[str]) -> Registry:
    """The built-ins, and `test.touch`, which says when its handler runs."""

    async def touch(ctx: Any, value: Counted) -> Counted:
        ran.append(ctx.caller.id)
        return value

    registry = default_registry()
    registry.register(OperationSpec(
        name="test.touch", description="Say the handler ran.", input_type=Counted, output_type=Counted,
        handler=touch, trust=frozenset({"operator", "gateway", "child-agent", "system"}), audit_kind="test",
        prompt_visible=True,
    ))
    return registry


def limited(store: Any, rate: str, clock: Clock, registry: Registry | None = None) -> Executor:
    rule = parse_call_rate(rate)
    assert rule is not None
    return Executor(registry or default_registry(), store, call_limit=GatewayCallRate(store, rule, clock=clock))


async def lease_rows(store: Any) -> list[float]:
    return [row[0] for row in await store.read_sql(
        lambda conn: conn.execute(f"SELECT at FROM {table.LEASES} WHERE key = ? ORDER BY at", (KEY,)).fetchall())]


# -- the setting -----------------------------------------------------------------------


def test_the_setting_reads_like_a_provider_limit_with_calls_only() -> None:
    assert parse_call_rate(None) == parse_call_rate("") == parse_call_rate(DEFAULT_GATEWAY_RATE)
    assert parse_call_rate("600rpm") == RateRule(pattern=KEY, requests=600, window_s=60.0)
    assert parse_call_rate(" 20req/1s ") == RateRule(pattern=KEY, requests=20, window_s=1.0)
    assert parse_call_rate("5req/500ms") == RateRule(pattern=KEY, requests=5, window_s=0.5)
    assert parse_call_rate("3req") == RateRule(pattern=KEY, requests=3, window_s=60.0)
    assert parse_call_rate("off") is parse_call_rate("OFF") is None
    assert call_rate_from_env({}) == RateRule(pattern=KEY, requests=600, window_s=60.0)
    assert call_rate_from_env({"GORMES_GATEWAY_RATE": "off"}) is None


@pytest.mark.parametrize("value", [
    "5tpm", "600rpm,100tpm", "0", "-1rpm", "fast", "5rpm/2s", "5req/0s", "0rpm", "2000000rpm", "5req/fast",
    "3req/" + "9" * 400 + "s", "nan", "600 rpm",
])
def test_a_bad_setting_is_one_line_naming_it(value: str) -> None:
    with pytest.raises(InvalidRateLimit) as caught:
        parse_call_rate(value)
    text = str(caught.value)
    assert text.startswith(f"GORMES_GATEWAY_RATE={value!r}: ") and "\n" not in text


# -- the window --------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_window_frees_room_as_its_calls_age_and_a_refusal_runs_nothing(backend: str, db_path: Path):
    clock = Clock()
    ran: list[str] = []
    async with backend_store(backend, db_path) as store:
        executor = limited(store, "3req/10s", clock, counting_registry(ran))
        for step in range(3):
            await executor.call("test.touch", {"n": step}, GATEWAY)
            clock.now += 2.0
        head = await store.head()
        with pytest.raises(CallRateLimited) as caught:  # at +6s: the first call frees its room at +10s
            await executor.call("test.touch", {"n": 9}, GATEWAY)
        assert caught.value.retry_after_s == pytest.approx(4.0)
        assert str(caught.value) == ("'gateway' callers may make at most 3 calls per 10s between them"
                                     " (GORMES_GATEWAY_RATE=3req/10s); retry in 4s")
        assert isinstance(caught.value, OperationDenied)
        assert ran == [GATEWAY.id] * 3
        records = await store.read_all(after_position=head)
        assert [r.type for r in records] == ["audit.operation"]
        audit = records[0].event
        assert (audit.operation, audit.allowed, audit.outcome) == ("test.touch", False, "denied")
        assert audit.error.startswith("CallRateLimited: 'gateway' callers may make at most 3 calls")
        clock.now += 4.0  # the first call's lease leaves the window
        await executor.call("test.touch", {"n": 10}, GATEWAY)
        with pytest.raises(CallRateLimited):
            await executor.call("test.touch", {"n": 11}, GATEWAY)
        assert len(ran) == 4


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_key_keeps_no_more_rows_than_the_limit(backend: str, db_path: Path):
    """Each look deletes the leases that left the window, and a refused call takes
    none: however long a gateway calls, the key holds at most the limit's rows."""
    clock = Clock()
    async with backend_store(backend, db_path) as store:
        executor = limited(store, "4req/10s", clock)
        served = refused = 0
        for _ in range(200):
            try:
                await executor.call("time.now", {}, GATEWAY)
                served += 1
            except CallRateLimited:
                refused += 1
            clock.now += 0.5
            assert len(await lease_rows(store)) <= 4
        assert served == 4 * (200 // 20) and refused == 200 - served  # 4 a window of 20 steps


@pytest.mark.parametrize("backend", BACKENDS)
async def test_only_a_gateways_own_calls_count_and_the_others_go_past_a_full_window(backend: str, db_path: Path):
    """The operator, the system, a run acting for a gateway and a child agent are
    served with the gateways' window full, and take no room in it."""
    clock = Clock()
    async with backend_store(backend, db_path) as store:
        executor = limited(store, "2req/10s", clock)
        await executor.call("time.now", {}, GATEWAY)
        for caller in OTHERS * 3:
            await executor.call("time.now", {}, caller)
        await executor.call("time.now", {}, GATEWAY)  # the second place was still free
        with pytest.raises(CallRateLimited):
            await executor.call("time.now", {}, GATEWAY)
        for caller in OTHERS:
            await executor.call("time.now", {}, caller)
        assert len(await lease_rows(store)) == 2


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_call_refused_for_its_class_takes_room_as_any_call_does(backend: str, db_path: Path):
    """A call of an operation the gateway may not call, or of none, is audited as
    every call is, so it takes room (decision 0072's addendum: a flood of them was
    never refused nor ended); past the window such a call is refused by the rate."""
    clock = Clock()
    async with backend_store(backend, db_path) as store:
        executor = limited(store, "2req/10s", clock)
        with pytest.raises(OperationDenied, match="may not be run by a 'gateway' caller"):
            await executor.call("memory.forget", {"id": "x"}, GATEWAY)
        with pytest.raises(OperationDenied, match="unknown operation"):
            await executor.call("no.such", {}, GATEWAY)
        assert len(await lease_rows(store)) == 2
        with pytest.raises(CallRateLimited):
            await executor.call("no.such", {}, GATEWAY)
        with pytest.raises(CallRateLimited):
            await executor.call("time.now", {}, GATEWAY)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_two_stores_calling_at_once_share_one_quota(backend: str, db_path: Path):
    """Twenty calls at once through two stores on one database (two processes'
    connections): five are served, and every one of the fifteen refusals is
    audited."""
    clock = Clock()
    async with backend_store(backend, db_path) as store, reopen_store(store) as other:
        executors = [limited(s, "5req/60s", clock) for s in (store, other)]
        outcomes = await outcomes_at_once(20, lambda n: executors[n % 2].call(
            "memory.recall", {"query": "q"}, Caller(trust="gateway", id=f"mcp:name-{n}")))
        assert outcomes == ["refused"] * 15 + ["served"] * 5
        assert len(await lease_rows(store)) == 5
        audited = [r.event for r in await store.read_all(types=["audit.operation"])]
        assert sorted(a.outcome for a in audited) == ["denied"] * 15 + ["ok"] * 5


async def test_the_mcp_servers_executor_is_given_the_limit(store: Any, monkeypatch: pytest.MonkeyPatch):
    """The one door of gateway calls made outside a run: `serve_stdio`'s executor
    takes the setting (read there when the CLI did not)."""
    from gormes import mcp_server

    built: list[Executor] = []

    class Stop(Exception):
        pass

    def build_server(executor: Executor, trust: str) -> Any:
        built.append(executor)
        raise Stop

    monkeypatch.setattr(mcp_server, "build_server", build_server)
    monkeypatch.setenv("GORMES_GATEWAY_RATE", "7req/3s")
    await JobQueue.open(store)
    for given, expected in (("env", RateRule(pattern=KEY, requests=7, window_s=3.0)), (None, None)):
        with pytest.raises(Stop):
            await mcp_server.serve_stdio(store, registry=default_registry(), call_rate=given)
        limit = built.pop().call_limit
        assert (None if limit is None else limit.rule) == expected  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_window_found_full_is_refused_without_a_look_until_it_frees(backend: str, db_path: Path):
    """The first refusal's look says when the window frees; until then the
    process's refusals write only their audit records (one transaction each, not
    two), and the first call after it looks again."""
    clock = Clock()
    async with backend_store(backend, db_path) as store:
        executor = limited(store, "2req/10s", clock)
        for _ in range(2):
            await executor.call("time.now", {}, GATEWAY)
        transactions = 0
        transact = store.transact

        async def counted(fn: Any) -> Any:
            nonlocal transactions
            transactions += 1
            return await transact(fn)

        store.transact = counted  # type: ignore[method-assign]
        with pytest.raises(CallRateLimited, match="retry in 10s"):
            await executor.call("time.now", {}, GATEWAY)
        assert transactions == 2  # the look, the audit record
        clock.now += 9.5
        for _ in range(5):
            with pytest.raises(CallRateLimited, match="retry in 1s"):
                await executor.call("time.now", {}, GATEWAY)
        assert transactions == 2 + 5
        clock.now += 0.5
        await executor.call("time.now", {}, GATEWAY)  # the first lease left the window
        assert transactions == 7 + 2  # the look that took a lease, the audit record


async def test_a_caller_refused_in_a_loop_can_still_be_cancelled(store: Any):
    """A refusal without a look still passes a checkpoint: a task that calls past
    the limit in a loop (the audit append is shielded) is ended by its cancel
    (without it, the loop below never ends)."""
    clock = Clock()
    executor = limited(store, "1req/600s", clock)
    await executor.call("time.now", {}, GATEWAY)
    with pytest.raises(CallRateLimited):  # the look that finds the window full
        await executor.call("time.now", {}, GATEWAY)
    assert executor.call_limit.full_until > clock.now  # type: ignore[union-attr]
    with trio.move_on_after(0.2) as scope:
        while True:  # every refusal here is made without a look
            with pytest.raises(CallRateLimited):
                await executor.call("time.now", {}, GATEWAY)
    assert scope.cancelled_caught


async def test_a_caller_refused_more_often_in_a_window_than_it_allows_is_flooded(store: Any):
    """A client that keeps calling while refused grows the log by an audit record a
    refusal; refused more times within one window than the window allows calls (at
    least MIN_FLOOD), it is `flooded`, and its last refusal says the connection
    closes (gormes/mcp_server.py ends it)."""
    clock = Clock()
    executor = limited(store, "2req/10s", clock)
    limit = executor.call_limit
    assert isinstance(limit, GatewayCallRate)
    for _ in range(2):
        await executor.call("time.now", {}, GATEWAY)
    for _ in range(MIN_FLOOD - 1):
        with pytest.raises(CallRateLimited) as caught:
            await executor.call("time.now", {}, GATEWAY)
        assert "closes" not in str(caught.value)
    assert not limit.flooded
    with pytest.raises(CallRateLimited) as caught:
        await executor.call("time.now", {}, GATEWAY)
    assert limit.flooded
    assert str(caught.value).endswith(f"; the connection closes: it was refused {MIN_FLOOD} times within 10s")


async def test_a_caller_that_waits_between_refusals_is_never_flooded(store: Any):
    clock = Clock()
    executor = limited(store, "2req/10s", clock)
    limit = executor.call_limit
    assert isinstance(limit, GatewayCallRate)
    refused = 0
    for _ in range(MIN_FLOOD * 3):  # one call every 0.2 s for a minute: 10 admitted, 290 refused
        try:
            await executor.call("time.now", {}, GATEWAY)
        except CallRateLimited as exc:
            refused += 1
            assert "closes" not in str(exc)
        clock.now += 0.2
    assert refused == MIN_FLOOD * 3 - 12 and not limit.flooded


# -- a reconnection after an ended flood (decision 0081) --------------------------------


async def flood_until_ended(executor: Executor) -> None:
    limit = executor.call_limit
    assert isinstance(limit, GatewayCallRate)
    while not limit.flooded:
        with contextlib.suppress(CallRateLimited):
            await executor.call("time.now", {}, GATEWAY)


async def flood_rows(store: Any) -> list[float]:
    return [row[0] for row in await store.read_sql(lambda conn: conn.execute(
        f"SELECT at FROM {table.LEASES} WHERE key = ? ORDER BY at", (call_floods.FLOODS_KEY,)).fetchall())]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_new_connection_after_a_flood_is_refused_at_its_first_call_until_the_window_frees(
        backend: str, db_path: Path):
    """An ended flood leaves one mark; a new connection (another `GatewayCallRate`,
    as another process is) whose first call finds the window full is refused at its
    start and `ended`, told to come back when the window frees; then it is served.
    A connection past its first call is never asked."""
    clock = Clock()
    async with backend_store(backend, db_path) as store:
        polite = limited(store, "2req/10s", clock)
        await polite.call("time.now", {}, GATEWAY)  # served before the flood
        clock.now += 1.0
        flooder = limited(store, "2req/10s", clock)
        await flood_until_ended(flooder)
        assert await flood_rows(store) == [clock.now]
        clock.now += 2.0
        again = limited(store, "2req/10s", clock)
        with pytest.raises(CallRateLimited) as caught:
            await again.call("time.now", {}, Caller(trust="gateway", id="mcp:another-name"))
        assert caught.value.retry_after_s == pytest.approx(7.0)  # the polite call's lease frees at +10s
        assert str(caught.value).endswith("retry in 7s; the connection closes at its start: a gateway connection"
                                          " was ended for flooding 2s ago and the window is still full")
        assert again.call_limit.ended and not again.call_limit.flooded  # type: ignore[union-attr]
        with pytest.raises(CallRateLimited):  # a call read beside it: the same refusal
            await again.call("time.now", {}, GATEWAY)
        with pytest.raises(CallRateLimited) as plain:  # the polite connection: refused call by call
            await polite.call("time.now", {}, GATEWAY)
        assert "closes" not in str(plain.value) and not polite.call_limit.ended  # type: ignore[union-attr]
        clock.now += 7.0  # the window frees
        later = limited(store, "2req/10s", clock)
        await later.call("time.now", {}, GATEWAY)
        assert not later.call_limit.ended  # type: ignore[union-attr]
        clock.now += 10.0  # a later flood's mark deletes those out of the window
        await flood_until_ended(limited(store, "2req/10s", clock))
        assert await flood_rows(store) == [clock.now]


def test_come_back_at_is_the_earlier_of_the_window_freeing_and_the_mark_leaving() -> None:
    assert call_floods.come_back_at(flooded_at=105.0, frees_at=111.0, window_s=10.0) == 111.0
    assert call_floods.come_back_at(flooded_at=100.5, frees_at=111.0, window_s=10.0) == 110.5
