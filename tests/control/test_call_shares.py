"""A gateway client's share of the class's call rate (`GORMES_GATEWAY_CLIENT_RATE`,
gormes/control/call_shares.py, decision 0082) through the executor, on both
backends: a greedy client is refused at its share while another is still served,
renaming gains nothing past the class, the refusal says which limit refused and is
counted as every call-rate refusal is, and the shares' keys are bounded and pruned.

Before decision 0082 a client could take the class's whole rate: there was no
share to set (these tests fail there: `parse_client_share` did not exist). The
same attack through two `gormes mcp` processes is in
tests/security/test_attack_gateway_share.py.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import Clock, limited, outcomes_at_once
from pg_helpers import backend_store, reopen_store

from gormes.control import call_refusals
from gormes.control import limits_table as table
from gormes.control.call_rate import KEY, GatewayCallRate, stated_rule
from gormes.control.rate_rules import InvalidRateLimit, RateRule
from gormes.ops.spec import Caller, CallRateLimited

BACKENDS = ["sqlite", "postgres"]
GREEDY = Caller(trust="gateway", id="mcp:buggy-loop")
POLITE = Caller(trust="gateway", id="mcp:alice")
SHARE_LINE = ("each 'gateway' client may make at most 2 calls a minute of the class's"
              " (GORMES_GATEWAY_CLIENT_RATE=2rpm of GORMES_GATEWAY_RATE=8rpm); retry in {}s")


def start() -> Clock:
    return Clock(1_800_000_000.0)


async def rows(store: Any) -> dict[str, int]:
    """Lease rows by key."""
    return dict(await store.read_sql(lambda conn: conn.execute(
        f"SELECT key, count(*) FROM {table.LEASES} GROUP BY key").fetchall()))


# -- the setting -----------------------------------------------------------------------


def test_the_share_is_a_quarter_of_the_class_unless_set_and_never_without_the_class() -> None:
    from gormes.control.call_rate import client_share_from_env, parse_call_rate, parse_client_share

    default = parse_call_rate(None)
    assert client_share_from_env({}, default) == RateRule(pattern=KEY, requests=150, window_s=60.0)
    assert parse_client_share("  ", parse_call_rate("20req/1s")) == RateRule(pattern=KEY, requests=5, window_s=1.0)
    assert parse_client_share(None, parse_call_rate("2req/60s")) == RateRule(pattern=KEY, requests=1, window_s=60.0)
    assert parse_client_share("300rpm", default) == RateRule(pattern=KEY, requests=300, window_s=60.0)
    assert parse_client_share("10req/1s", default) == RateRule(pattern=KEY, requests=10, window_s=1.0)
    assert parse_client_share("off", default) is None
    assert parse_client_share(None, None) is None and parse_client_share("OFF", None) is None


@pytest.mark.parametrize(("value", "rate", "says"), [
    ("fast", "600rpm", "a call limit reads like 600rpm"),
    ("5tpm", "600rpm", "counts calls, not tokens"),
    ("0rpm", "600rpm", ""),
    ("2000000rpm", "600rpm", "at most 1,000,000 calls"),
    ("150rpm", "off", "GORMES_GATEWAY_RATE=off turns off"),
    ("100req/2m", "600rpm", "its window may be at most 60s"),
])
def test_a_bad_share_is_one_line_naming_it(value: str, rate: str, says: str) -> None:
    from gormes.control.call_rate import client_share_from_env, parse_call_rate

    with pytest.raises(InvalidRateLimit) as caught:
        client_share_from_env({"GORMES_GATEWAY_CLIENT_RATE": value}, parse_call_rate(rate))
    text = str(caught.value)
    assert text.startswith(f"GORMES_GATEWAY_CLIENT_RATE={value!r}: ") and "\n" not in text and says in text, text


# -- the share ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_greedy_client_at_its_share_leaves_the_others_served(backend: str, db_path: Path):
    """A client calling as fast as it is allowed, waiting as it is told (never a
    flood), is refused at its share; another client is still served, and the class's
    limit still holds for all of them. The refusal says it was the client's share,
    states the class's rule as every refusal does, is audited and is counted by the
    index `gormes top`, the doctor and `/metrics` read."""
    clock = start()
    async with backend_store(backend, db_path) as store:
        executor = limited(store, "8req/60s", clock, client_rate="2req/60s")
        greedy_served = greedy_refused = 0
        for _ in range(30):  # a call every 2 s, each refusal waited out as far as the test goes
            try:
                await executor.call("time.now", {}, GREEDY)
                greedy_served += 1
            except CallRateLimited as exc:
                greedy_refused += 1
                assert str(exc) == SHARE_LINE.format(round(exc.retry_after_s)), str(exc)
            clock.now += 2.0
        assert (greedy_served, greedy_refused) == (2, 28)  # its share of a 60 s window
        assert not executor.call_limit.flooded  # type: ignore[union-attr]
        for _ in range(2):
            await executor.call("time.now", {}, POLITE)  # the class has room: served
        with pytest.raises(CallRateLimited, match=r"of GORMES_GATEWAY_RATE=8rpm\); retry in 60s$"):
            await executor.call("time.now", {}, POLITE)
        audits = [r.event for r in await store.read_all(types=["audit.operation"])]
        denied = [a for a in audits if a.outcome == "denied"]
        assert len(denied) == 29 and {a.caller for a in denied} == {GREEDY.id, POLITE.id}
        assert all(a.error.startswith("CallRateLimited: each 'gateway' client may make") for a in denied)
        assert stated_rule(denied[0].error) == RateRule(pattern=KEY, requests=8, window_s=60.0)
        counted = await store.read_sql(lambda conn: call_refusals.refusals(conn, 0.0))
        assert counted is not None and counted.count == 29
        assert await store.read_sql(lambda conn: call_refusals.refused_after(conn, 0, 10_000, 0.0)) == 29
        # the class's limit is still the class's: six more names fill it, and the seventh is refused by it
        for n in range(6):
            with contextlib.suppress(CallRateLimited):
                await executor.call("time.now", {}, Caller(trust="gateway", id=f"mcp:n{n}"))
        with pytest.raises(CallRateLimited) as by_class:
            await executor.call("time.now", {}, Caller(trust="gateway", id="mcp:late"))
        assert str(by_class.value).startswith("'gateway' callers may make at most 8 calls a minute between them"
                                              " (GORMES_GATEWAY_RATE=8rpm); retry in ")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_renaming_gains_nothing_past_the_class_even_from_two_processes(backend: str, db_path: Path):
    """Ten names, three calls each, through two stores on one database (two
    processes): each name is served at most its share, all together at most the
    class's count; the shares' rows never outnumber the class's."""
    clock = start()
    async with backend_store(backend, db_path) as store, reopen_store(store) as other:
        executors = [limited(s, "8req/60s", clock, client_rate="2req/60s") for s in (store, other)]
        served: dict[str, int] = {}
        for n in range(10):
            caller = Caller(trust="gateway", id=f"mcp:name-{n}")
            for attempt in range(3):
                with contextlib.suppress(CallRateLimited):
                    await executors[attempt % 2].call("time.now", {}, caller)
                    served[caller.id] = served.get(caller.id, 0) + 1
        assert sum(served.values()) == 8 and max(served.values()) == 2
        by_key = await rows(store)
        assert by_key.pop(KEY) == 8 and sum(by_key.values()) == 8 and len(by_key) == 4


@pytest.mark.parametrize("backend", BACKENDS)
async def test_one_name_calling_at_once_through_two_stores_gets_its_share_and_no_more(backend: str, db_path: Path):
    """Twenty calls at once under one name through two stores on one database (two
    processes): the share's look and lease are in the class's transaction, so three
    are served, whatever the interleaving, and the class keeps room for another."""
    clock = start()
    async with backend_store(backend, db_path) as store, reopen_store(store) as other:
        executors = [limited(s, "8req/60s", clock, client_rate="3req/60s") for s in (store, other)]
        outcomes = await outcomes_at_once(20, lambda n: executors[n % 2].call("time.now", {}, GREEDY))
        assert outcomes == ["refused"] * 17 + ["served"] * 3
        await executors[0].call("time.now", {}, POLITE)
        by_key = await rows(store)
        assert by_key.pop(KEY) == 4 and sorted(by_key.values()) == [1, 3]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_shares_keys_are_bounded_and_leave_with_the_class_leases(backend: str, db_path: Path):
    """Any name (200 characters of quotes, wildcards, a replaced NUL, non-ASCII) gets
    a key of 46 ASCII characters; a client that never calls again leaves no rows
    once its calls leave the class's window, pruned by another client's look."""
    clock = start()
    names = ["x" * 196, "'; DROP TABLE rate_leases; --" + "%_" * 80, "\ufffd\u00e9\U0001f600" * 60]
    async with backend_store(backend, db_path) as store:
        executor = limited(store, "8req/10s", clock, client_rate="2req/10s")
        for name in names:
            await executor.call("time.now", {}, Caller(trust="gateway", id=f"mcp:{name[:200]}"))
            clock.now += 1.0
        keys = [key for key in await rows(store) if key != KEY]
        assert len(keys) == 3 and all(len(key) == 46 and key.isascii() and key.startswith(f"{KEY}:") for key in keys)
        clock.now += 10.0  # all three left the window
        await executor.call("time.now", {}, POLITE)
        assert sorted((await rows(store)).values()) == [1, 1]  # the class's lease and alice's, nothing left over


async def test_a_client_flooding_its_share_is_ended_and_its_reconnection_refused_at_the_start(store: Any):
    """A client that does not wait is ended once refused more often within the
    share's window than the share allows calls (at least MIN_FLOOD), not the class's
    count: its flood costs its share's refusals. Its reconnection is refused at its
    first call though the class has room (its share is full and the flood is
    marked, decision 0081); another client is served throughout."""
    clock = start()
    executor = limited(store, "1000req/60s", clock, client_rate="200req/60s")
    limit = executor.call_limit
    assert isinstance(limit, GatewayCallRate)
    while not limit.flooded:
        with contextlib.suppress(CallRateLimited):
            await executor.call("time.now", {}, GREEDY)
    audits = [r.event for r in await store.read_all(types=["audit.operation"])]
    assert [a.outcome for a in audits].count("ok") == 200 and len(audits) == 400  # 200 served, 200 refused
    assert audits[-1].error.endswith("; the connection closes: it was refused 200 times within 60s")
    clock.now += 1.0
    again = limited(store, "1000req/60s", clock, client_rate="200req/60s")
    with pytest.raises(CallRateLimited) as caught:
        await again.call("time.now", {}, GREEDY)
    assert str(caught.value).startswith(
        "each 'gateway' client may make at most 200 calls a minute of the class's (GORMES_GATEWAY_CLIENT_RATE=200rpm"
        " of GORMES_GATEWAY_RATE=1000rpm); retry in 59s; the connection closes at its start: a gateway connection")
    assert again.call_limit.ended  # type: ignore[union-attr]
    await limited(store, "1000req/60s", clock, client_rate="200req/60s").call("time.now", {}, POLITE)
