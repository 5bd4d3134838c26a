"""A gateway that reconnects after its flood was ended (decision 0081).

Decision 0072's addendum ends a connection that keeps calling while refused, after
about a window's allowance of refusals, each an audit record. A client that starts
`gormes mcp` again (as an MCP client over stdio does) flooded again: each
reconnection cost another allowance of records. Now a connection ended for flooding
is marked in the store, and a new connection whose first call finds the class's
window full while a mark is within the window is refused once, told when to come
back, and ended. Driven as an outsider drives it: `gormes mcp` processes and the mcp
SDK client, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp_helpers import audit_events, call_ok, calls_until_ended, gormes_mcp
from test_attack_gateway_rate import database

from gormes.control.call_rate import MIN_FLOOD

WINDOW_S = 8
RATE = {"GORMES_GATEWAY_RATE": f"4req/{WINDOW_S}s", "GORMES_GATEWAY_CLIENT_RATE": "off"}  # the class alone: no client share (decision 0082)
AT_START = re.compile(
    rf"CallRateLimited: 'gateway' callers may make at most 4 calls per {WINDOW_S}s between them"
    rf" \(GORMES_GATEWAY_RATE=4req/{WINDOW_S}s\); retry in (\d+)s; the connection closes at its start:"
    r" a gateway connection was ended for flooding \d+s ago and the window is still full")


@pytest.fixture(autouse=True)
def _no_rate_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GORMES_GATEWAY_RATE", raising=False)
    monkeypatch.delenv("GORMES_GATEWAY_CLIENT_RATE", raising=False)


async def flood(db: str, name: str, width: int = 16) -> list[str]:
    return await calls_until_ended(db, name, width, RATE)


async def records(open_store: Any) -> int:
    async with open_store() as store:
        return len(await audit_events(store))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_reconnection_after_a_flood_is_refused_once_at_its_start(backend: str, db_path: Path):
    """The flood is ended as before; then each reconnection, under a new name each
    time, calling one at a time, is refused at its first call with one line that
    says when to come back, costs one audit record, and is ended. Before, each was
    refused MIN_FLOOD times before it was ended."""
    async with database(backend, db_path) as (db, open_store):
        first = await flood(db, "mallory")
        assert first.count("ok") == 4 and "closed" in first
        before = await records(open_store)
        for n in range(3):
            got = await flood(db, f"mallory-{n}", width=1)
            assert len(got) == 2 and got[1] == "closed", got[:3]
            found = AT_START.fullmatch(got[0])
            assert found, got[0]
            assert 1 <= int(found.group(1)) <= WINDOW_S
        after = await records(open_store)
        assert after - before == 3  # one record a reconnection
        async with open_store() as store:
            latest = (await audit_events(store))[-3:]
        assert [(a.caller, a.outcome) for a in latest] == [(f"mcp:mallory-{n}", "denied") for n in range(3)]
        assert all(AT_START.fullmatch(a.error or "") for a in latest)


async def test_the_state_clears_when_the_window_frees(db_path: Path):
    """Told to come back in N seconds, a client that does is served: nothing holds
    the gateways refused beyond the window."""
    db = str(db_path)
    await flood(db, "mallory")
    got = await flood(db, "mallory-again", width=1)
    found = AT_START.fullmatch(got[0])
    assert found, got[0]
    await trio.sleep(int(found.group(1)) + 0.5)
    async with gormes_mcp(db, env=RATE, client_name="polite") as client:
        await call_ok(client, "time__now")


async def test_a_polite_client_connected_before_the_flood_keeps_its_connection(db_path: Path):
    """A client already served when another floods and reconnects is refused call
    by call while the window is full, as before, never ended; once it frees, served."""
    db = str(db_path)
    async with gormes_mcp(db, env=RATE, client_name="polite") as polite:
        await call_ok(polite, "time__now")
        await flood(db, "mallory")
        assert AT_START.fullmatch((await flood(db, "mallory-2", width=1))[0])
        refused = 0
        with trio.fail_after(4 * WINDOW_S):
            while True:  # one call a second, whatever it is told
                result = await polite.call_tool("time__now", {})
                if not result.is_error:
                    break
                assert "closes" not in result.content[0].text
                refused += 1
                await trio.sleep(1)
        assert refused >= 1


async def test_a_flood_of_reconnections_at_once_costs_each_its_calls_in_flight(db_path: Path):
    """Four connections opened at once after a flood, each with 8 calls in flight:
    each is ended at its start and its client is told when to come back; what each
    leaves is the calls the server read before it ended (each its own record,
    refused or cancelled), never MIN_FLOOD."""
    db = str(db_path)
    await flood(db, "mallory")
    waves: list[list[str]] = []

    async def wave(n: int) -> None:
        waves.append(await flood(db, f"wave-{n}", 8))

    async with database("sqlite", db_path) as (_, open_store):
        before = await records(open_store)
        async with trio.open_nursery() as nursery:
            for n in range(4):
                nursery.start_soon(wave, n)
        left = await records(open_store) - before
    assert 4 <= left <= 4 * 8 < MIN_FLOOD, left
    for got in waves:  # each is told when to come back, by the calls it had in flight
        assert any(AT_START.fullmatch(line) for line in got), got
        assert set(got) - {"closed"} == {line for line in got if AT_START.fullmatch(line)}, got
