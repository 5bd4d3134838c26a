"""`gateway.call_rate`: the doctor says when the gateways' call rate refused calls
(decision 0075), on both backends. The refusals are made through the real path
(the executor with a gateway caller and `GatewayCallRate`, as `gormes mcp` builds
it), the store's clock and the doctor's `now` the test's own. The same, through
`gormes mcp` and the doctor as processes: tests/mcp/test_mcp_call_rate_views.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from doctor_helpers import check, doctor
from pg_helpers import backend_store, url_for_schema

from gormes.control import call_refusals
from gormes.control import limits_table as table
from gormes.control.call_rate import KEY, GatewayCallRate, parse_call_rate
from gormes.health import Thresholds
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, CallRateLimited
from gormes.tools.builtin import default_registry

T0 = 1_800_000_000.0
DAY = 86_400.0
GATEWAY = Caller(trust="gateway", id="mcp:chatty-bot")
NAME = "gateway.call_rate"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def target_of(store: Any, db_path: Path) -> Path | str:
    return url_for_schema(store.schema) if store.dialect == "postgres" else db_path


async def gateway_calls(store: Any, clock: Clock, rate: str, n: int, caller: Caller = GATEWAY) -> int:
    """`n` gateway calls through a limited executor; how many were refused."""
    rule = parse_call_rate(rate)
    assert rule is not None
    executor = Executor(default_registry(), store, clock=clock, call_limit=GatewayCallRate(store, rule, clock=clock))
    refused = 0
    for _ in range(n):
        try:
            await executor.call("time.now", {}, caller)
        except CallRateLimited:
            refused += 1
    return refused


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_refused_gateway_calls_warn_with_how_many_since_when_and_the_setting(backend, db_path: Path):
    clock = Clock()
    async with backend_store(backend, db_path, clock=clock) as store:
        target = target_of(store, db_path)
        never = check(doctor(target, now=T0), NAME)
        assert never.status == "ok" and never.message.startswith("no gateway call has been limited"), never

        assert await gateway_calls(store, clock, "2req/60s", 2) == 0
        served = check(doctor(target, now=T0 + 1), NAME)
        assert (served.status, served.message) == (
            "ok", "no gateway call refused by the call rate (GORMES_GATEWAY_RATE) in the last 24h")

        clock.now = T0 + 10
        assert await gateway_calls(store, clock, "2req/60s", 3) == 3
        clock.now = T0 + 40
        assert await gateway_calls(store, clock, "2req/60s", 2) == 2
        refused = check(doctor(target, now=T0 + 100), NAME)
        assert refused.status == "warn", refused
        assert refused.message == (
            "5 gateway call(s) refused by the call rate in the last 24h, since 2027-01-15 08:00:10 UTC (90s ago);"
            " the latest 60s ago, to \"mcp:chatty-bot\"; the process that refused it allows 2 calls a minute"
            " (GORMES_GATEWAY_RATE=2rpm)")
        assert "raise GORMES_GATEWAY_RATE" in refused.remediation
        assert "`gormes audit export --since 24h`" in refused.remediation
        assert refused.detail == {"window_s": DAY, "refused": 5, "refused_more": False,
                                  "clients": [{"client": GATEWAY.id, "refused": 5}], "other_clients": 0,
                                  "other_refused": 0, "clients_read": 5}
        assert doctor(target, now=T0 + 100).status == "warnings"

        # a day on, they are history: ok again (the window is a threshold)
        assert check(doctor(target, now=T0 + 40 + DAY), NAME).status == "ok"
        hour = check(doctor(target, now=T0 + 100, thresholds=Thresholds(gateway_refusals_window_s=3600)), NAME)
        assert "in the last 1h, since" in hour.message


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_past_the_count_cap_it_says_more_than(backend, db_path: Path, monkeypatch):
    monkeypatch.setattr(call_refusals, "COUNT_CAP", 3)
    clock = Clock()
    async with backend_store(backend, db_path, clock=clock) as store:
        assert await gateway_calls(store, clock, "1req/60s", 6) == 5
        refused = check(doctor(target_of(store, db_path), now=T0 + 1), NAME)
    assert refused.message.startswith("more than 3 gateway call(s) refused"), refused


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_limited_calls_with_no_index_of_their_refusals_warn_that_they_cannot_be_counted(backend, db_path: Path):
    """A database a gormes mcp of decision 0072 limited calls on, before this one
    made the index: the doctor does not scan the log for them, and says so."""
    clock = Clock()
    async with backend_store(backend, db_path, clock=clock) as store:
        assert await gateway_calls(store, clock, "1req/60s", 3) == 2
        await store.transact(lambda tx: tx.execute(f"DROP INDEX {call_refusals.INDEX}"))
        assert await store.read_sql(lambda c: c.execute(
            f"SELECT count(*) FROM {table.LEASES} WHERE key = ?", (KEY,)).fetchone()[0]) == 1
        blind = check(doctor(target_of(store, db_path), now=T0 + 1), NAME)
    assert blind.status == "warn", blind
    assert "cannot be counted" in blind.message and call_refusals.INDEX in blind.message
    assert "the first limited call of one makes the index" in blind.remediation


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_it_names_the_clients_refused_most_a_few_of_them(backend, db_path: Path, monkeypatch):
    """Whom the refusals went to, most first: the top TOP_CALLERS clients (3 here),
    the rest counted together; each name quoted as JSON quotes it, so a client
    cannot name itself into the list; in the message and in `--json`'s detail."""
    monkeypatch.setattr(call_refusals, "TOP_CALLERS", 3)
    forged = 'mcp:x" (999), "mcp:admin\n'
    clients = {"mcp:a": 4, "mcp:b": 2, forged: 3, "mcp:c": 1, "mcp:d": 1}
    clock = Clock()
    async with backend_store(backend, db_path, clock=clock) as store:
        assert await gateway_calls(store, clock, "1req/60s", 1) == 0
        for i, (name, n) in enumerate(clients.items()):
            clock.now = T0 + 1 + i
            assert await gateway_calls(store, clock, "1req/60s", n, Caller(trust="gateway", id=name)) == n
        outside = Caller(trust="gateway", id="mcp:yesterday")
        found = check(doctor(target_of(store, db_path), now=T0 + 10), NAME)
        with monkeypatch.context() as patched:
            patched.setattr(call_refusals, "COUNT_CAP", 6)
            capped = check(doctor(target_of(store, db_path), now=T0 + 10), NAME)
        clock.now = T0 + 2 * DAY  # a day later: only what the window holds
        assert await gateway_calls(store, clock, "1req/60s", 3, outside) == 2
        later = check(doctor(target_of(store, db_path), now=T0 + 2 * DAY + 1), NAME)
    assert found.status == "warn", found
    assert found.message.endswith(
        '; refused most to "mcp:a" (4), "mcp:x\\" (999), \\"mcp:admin\\n" (3), "mcp:b" (2)'
        " and 2 other client(s) (2)"), found.message
    assert found.detail == {
        "window_s": DAY, "refused": 11, "refused_more": False,
        "clients": [{"client": "mcp:a", "refused": 4}, {"client": forged, "refused": 3},
                    {"client": "mcp:b", "refused": 2}],
        "other_clients": 2, "other_refused": 2, "clients_read": 11}
    assert later.detail["clients"] == [{"client": "mcp:yesterday", "refused": 2}] and "refused most" not in \
        later.message  # one client: the message names it already
    # past the cap, the clients of the latest COUNT_CAP refusals: d's, c's, the forged name's 3, one of b's
    assert capped.detail == {
        "window_s": DAY, "refused": 6, "refused_more": True,
        "clients": [{"client": forged, "refused": 3}, {"client": "mcp:b", "refused": 1},
                    {"client": "mcp:c", "refused": 1}],
        "other_clients": 1, "other_refused": 1, "clients_read": 6}
    assert "; refused most among the latest 6 to " in capped.message


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_refusal_by_a_clients_share_states_the_share_and_the_class(backend, db_path: Path):
    """A refusal by a client's share of the rate (decision 0082) is counted as every
    call-rate refusal; the message states the share and the class's limit, and the
    remediation says how to raise the share."""
    from gormes.control.call_rate import parse_client_share

    clock = Clock()
    async with backend_store(backend, db_path, clock=clock) as store:
        rule = parse_call_rate("8req/60s")
        assert rule is not None
        limit = GatewayCallRate(store, rule, share=parse_client_share(None, rule), clock=clock)
        executor = Executor(default_registry(), store, clock=clock, call_limit=limit)
        for _ in range(2):
            await executor.call("time.now", {}, GATEWAY)
        for _ in range(3):
            with pytest.raises(CallRateLimited):
                await executor.call("time.now", {}, GATEWAY)
        refused = check(doctor(target_of(store, db_path), now=T0 + 30), NAME)
        assert refused.status == "warn", refused
        assert refused.message.endswith(
            "to \"mcp:chatty-bot\"; the process that refused it allows each client 2 calls a minute"
            " (GORMES_GATEWAY_CLIENT_RATE=2rpm) of 8 calls a minute (GORMES_GATEWAY_RATE=8rpm)"), refused.message
        assert refused.message.startswith("3 gateway call(s) refused by the call rate in the last 24h")
        assert "raise the share the same way, or set it off" in refused.remediation


async def test_the_latest_clients_name_is_quoted_so_it_cannot_speak_for_the_doctor(db_path: Path):
    """A client names itself: one named to read as the message's own words (a higher
    limit, a second client) is shown quoted, as JSON quotes it (0075's message gave it bare)."""
    forged = 'mcp:x; the process that refused it allows 9999 calls"\n'  # under SHOWN_NAME: not cut
    clock = Clock()
    async with backend_store("sqlite", db_path, clock=clock) as store:
        assert await gateway_calls(store, clock, "1req/60s", 2, Caller(trust="gateway", id=forged)) == 1
        refused = check(doctor(target_of(store, db_path), now=T0 + 1), NAME)
    assert f"the latest 1s ago, to {json.dumps(forged)}; the process that refused it allows 1 call" \
           in refused.message, refused.message
