"""One gateway client takes the whole class's call rate (decision 0082).

The gateways' call rate (`GORMES_GATEWAY_RATE`, decision 0072) was one allowance
for the class: a client calling in a loop, one call after the other's answer (so
never ended as a flood), took all of it, and every other client was refused: a
buggy loop in one chat client stopped everyone's. Each client now has a share of
the class's rate (`GORMES_GATEWAY_CLIENT_RATE`, a quarter by default), in addition
to the class's limit: past its share a client is refused in one line that says so,
and the others are still served; past the class's limit everyone is, whatever
names they take.

Every attack here is made as an outsider makes it: `gormes mcp` processes driven by
the `mcp` SDK client, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, run_gormes
from mcp_helpers import (
    CLIENT_NAME, audit_events, calls_until_ended, gormes_mcp, pipelined_until_ended, raw_gormes_mcp,
)
from test_attack_gateway_rate import attempt, database, outcomes

from gormes.control import call_refusals
from gormes.control.call_rate import MIN_FLOOD, stated_rule
from gormes.control.rate_rules import RateRule
from gormes.events.sqlite import SQLiteEventStore

RATE = {"GORMES_GATEWAY_RATE": "8req/600s"}  # the share unset: a quarter, 2req/600s; nothing frees mid-test
SHARE_REFUSAL = re.compile(
    r"CallRateLimited: each 'gateway' client may make at most 2 calls per 600s of the class's"
    r" \(GORMES_GATEWAY_CLIENT_RATE=2req/600s of GORMES_GATEWAY_RATE=8req/600s\); retry in \d+s")
CLASS_REFUSAL = re.compile(
    r"CallRateLimited: 'gateway' callers may make at most 8 calls per 600s between them"
    r" \(GORMES_GATEWAY_RATE=8req/600s\); retry in \d+s")


@pytest.fixture(autouse=True)
def _no_rate_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GORMES_GATEWAY_RATE", "GORMES_GATEWAY_CLIENT_RATE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_greedy_client_takes_its_share_and_the_others_are_still_served(backend: str, db_path: Path):
    """A client calling in a loop (one call at a time, never a flood) is served its
    share and refused past it, in a line naming the share; a second client, its
    process beside the first, is served; new names are served their shares until the
    class's limit, and the next name is refused by the class's."""
    async with database(backend, db_path) as (db, open_store):
        async with gormes_mcp(db, env=RATE, client_name="buggy-loop") as greedy, \
                gormes_mcp(db, env=RATE, client_name="alice") as alice:
            greedy_lines = [await attempt(greedy, "time__now") for _ in range(8)]
            alice_lines = [await attempt(alice, "memory__recall", query="deploy") for _ in range(2)]
        assert greedy_lines[:2] == ["ok", "ok"], greedy_lines
        assert all(SHARE_REFUSAL.fullmatch(line) for line in greedy_lines[2:]), greedy_lines
        assert alice_lines == ["ok", "ok"], alice_lines
        for name in ("bob", "carol"):  # new names: each its share, no more than the class's room
            async with gormes_mcp(db, env=RATE, client_name=name) as client:
                assert [await attempt(client, "time__now") for _ in range(2)] == ["ok", "ok"]
        async with gormes_mcp(db, env=RATE, client_name="a-new-name") as late:
            assert CLASS_REFUSAL.fullmatch(await attempt(late, "time__now"))
        audited = await outcomes(open_store)
        assert [who for _, who, outcome, _ in audited if outcome == "ok"] == (
            ["mcp:buggy-loop"] * 2 + ["mcp:alice"] * 2 + ["mcp:bob"] * 2 + ["mcp:carol"] * 2)
        denied = [(who, error) for _, who, outcome, error in audited if outcome == "denied"]
        assert [who for who, _ in denied] == ["mcp:buggy-loop"] * 6 + ["mcp:a-new-name"]
        assert all(stated_rule(error) == RateRule(pattern="calls:gateway", requests=8, window_s=600.0)
                   for _, error in denied)
        async with open_store() as store:  # counted as every call-rate refusal: top, doctor, /metrics
            counted = await store.read_sql(lambda conn: call_refusals.refusals(conn, 0.0))
        assert counted is not None and counted.count == 7 and counted.last_caller == "mcp:a-new-name"


@pytest.mark.parametrize(("share", "rate"), [
    ("fast", None), ("5tpm", None), ("0rpm", None), ("150rpm", "off"), ("100req/2m", "600rpm"),
])
def test_a_bad_share_is_one_line_and_exit_2_before_the_database_is_opened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, share: str, rate: str | None):
    monkeypatch.setenv("GORMES_GATEWAY_CLIENT_RATE", share)
    if rate is not None:
        monkeypatch.setenv("GORMES_GATEWAY_RATE", rate)
    db = tmp_path / "never.db"
    done = run_gormes(db, "mcp", input="")
    line = assert_one_line_error(done)
    assert done.returncode == 2, done.stderr
    assert line.startswith(f"gormes: error: GORMES_GATEWAY_CLIENT_RATE={share!r}: "), line
    assert not db.exists()


async def flood(db: str, name: str, width: int) -> list[str]:
    return await calls_until_ended(db, name, width, RATE)


async def test_a_client_flooding_its_share_is_ended_and_refused_at_its_reconnections_start(
        db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A client that does not wait, refused by its share while the class has room, is
    ended after MIN_FLOOD refusals (its share allows 2), the server saying it was past
    its share; reconnecting under the same name, it is refused at its first call and
    ended (decision 0081 asks a share found full too); another client is served."""
    monkeypatch.setenv("GORMES_GATEWAY_RATE", RATE["GORMES_GATEWAY_RATE"])
    stderr = tmp_path / "stderr"
    sent = MIN_FLOOD * 50
    async with raw_gormes_mcp(db_path, stderr) as raw:
        await pipelined_until_ended(raw, sent)
    assert raw.process.returncode == 1
    last = stderr.read_text().splitlines()[-1]
    assert re.fullmatch(r"gormes: error: the client kept calling while refused \(100 refusals within 600s, past"
                        r" GORMES_GATEWAY_CLIENT_RATE=2req/600s\): connection closed; each refusal is audited",
                        last), last
    again = await flood(str(db_path), CLIENT_NAME, width=1)
    assert len(again) == 2 and again[1] == "closed", again
    assert re.fullmatch(SHARE_REFUSAL.pattern + r"; the connection closes at its start: a gateway connection was"
                        r" ended for flooding \d+s ago and the window is still full", again[0]), again[0]
    async with gormes_mcp(db_path, env=RATE, client_name="alice") as alice:
        assert await attempt(alice, "time__now") == "ok"
    async with SQLiteEventStore.open(db_path) as store:
        audits = await audit_events(store)
    ours = [a.outcome for a in audits if a.caller == f"mcp:{CLIENT_NAME}"]
    assert ours.count("ok") == 2 and MIN_FLOOD + 1 <= ours.count("denied") and len(ours) < sent


@pytest.mark.parametrize("tool", ["approval__approve", "no__such_tool"])
async def test_calls_of_a_tool_not_served_take_room_and_a_flood_of_them_is_ended(db_path: Path, tool: str):
    """A red-team's finding: a call of an operation the gateway may not call (the
    operator's `approval.approve`), or of none, was refused before the call rate was
    asked, so it took no room, and was audited all the same: one connection made
    10,000 such calls in 25 s, each an audit record, and was never ended. Such a
    call takes room as any call does: past the share it is refused by the call rate,
    and the flood is ended as every other."""
    got = await calls_until_ended(str(db_path), "flooder", 8, RATE, tool=tool)
    assert got[-1] == "closed", got[-5:]
    assert 2 < len(got) < 8 * MIN_FLOOD, len(got)  # ended, and soon
    answered = [line for line in got if "UnknownOperation" in line]
    assert len(answered) == 2, answered  # its share: answered as before
    others = {line for line in got if line not in answered and line != "closed"}
    assert others and all(SHARE_REFUSAL.match(line) for line in others), others  # the last says it closes
    async with SQLiteEventStore.open(db_path) as store:
        records = [e for e in await audit_events(store) if e.caller == "mcp:flooder"]
    assert len(records) < 8 * MIN_FLOOD, len(records)
