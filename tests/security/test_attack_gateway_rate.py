"""A gateway that calls as fast as it likes (decision 0072).

The caps on what a gateway holds (live jobs, facts) said nothing of how often it
calls: an MCP client could call `memory.recall`, `job.list` or `time.now` as fast
as it could send them, from as many `gormes mcp` processes as it liked, under as
many names, and every call ran its handler and wrote its audit record. The gateway
class now has a call rate, `GORMES_GATEWAY_RATE` (600 calls a minute by default),
shared by every process on the store: past it a call is refused before its handler
runs, in one line that says the limit and when to retry, and audited.

Every attack here is made as an outsider makes it: `gormes mcp` processes driven by
the `mcp` SDK client, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from cli_helpers import assert_one_line_error, run_gormes
from mcp_helpers import CLIENT_NAME, audit_events, call_ok, call_refused, gormes_mcp, pipelined_until_ended, raw_gormes_mcp
from pg_helpers import PG_URL, fresh_schema, url_for_schema

from gormes.control.call_rate import MIN_FLOOD
from gormes.events.sqlite import SQLiteEventStore

LIMIT = 4
# A window no test outlives: nothing frees mid-test. The class's limit alone: each client's
# share (decision 0082, tests/security/test_attack_gateway_share.py) is off.
RATE = {"GORMES_GATEWAY_RATE": f"{LIMIT}req/600s", "GORMES_GATEWAY_CLIENT_RATE": "off"}
REFUSAL = re.compile(  # the whole line: the limit, the setting, when to retry, and nothing else
    rf"CallRateLimited: 'gateway' callers may make at most {LIMIT} calls per 600s between them"
    rf" \(GORMES_GATEWAY_RATE={LIMIT}req/600s\); retry in \d+s")


@pytest.fixture(autouse=True)
def _no_rate_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts from the default, whatever the developer's shell sets."""
    monkeypatch.delenv("GORMES_GATEWAY_RATE", raising=False)
    monkeypatch.delenv("GORMES_GATEWAY_CLIENT_RATE", raising=False)


@asynccontextmanager
async def database(backend: str, db_path: Path) -> AsyncIterator[tuple[str, Any]]:
    """(what `gormes --db` takes, a function opening a store on it to read)."""
    if backend == "sqlite":
        yield str(db_path), lambda: SQLiteEventStore.open(db_path)
        return
    from gormes.events.postgres import PostgresEventStore

    with fresh_schema() as schema:
        yield url_for_schema(schema), lambda: PostgresEventStore.open(PG_URL, schema=schema)


async def outcomes(open_store: Any) -> list[tuple[str, str, str, str | None]]:
    async with open_store() as store:
        return [(a.operation, a.caller, a.outcome, a.error) for a in await audit_events(store)]


async def attempt(client: Any, tool: str, **arguments: Any) -> str:
    """"ok", or the refusal's one line."""
    result = await client.call_tool(tool, arguments)
    return result.content[0].text if result.is_error else "ok"


# -- the attack ----------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_past_the_limit_a_gateways_calls_are_refused_in_one_line_and_audited(backend: str, db_path: Path):
    """Within the limit, served; past it, refused before the handler runs: a
    submit past it records no job, and each refusal is one audit record."""
    async with database(backend, db_path) as (db, open_store):
        async with gormes_mcp(db, env=RATE) as client:
            served = [await call_ok(client, "time__now"), await call_ok(client, "job__list"),
                      await call_ok(client, "memory__recall", query="deploy"),
                      await call_ok(client, "job__submit", name="report")]
            refused = [await call_refused(client, "memory__recall", query="deploy"),
                       await call_refused(client, "job__list"),
                       await call_refused(client, "job__submit", name="report"),
                       await call_refused(client, "time__now")]
        for line in refused:
            assert REFUSAL.fullmatch(line), line
        assert served[1] == {"jobs": [], "next": None} and served[3]["name"] == "report"
        async with open_store() as store:
            assert len(await store.read_all(types=["job.submitted"])) == 1  # the one served
        audited = await outcomes(open_store)
        caller = f"mcp:{CLIENT_NAME}"
        assert [(op, who, outcome) for op, who, outcome, _ in audited] == [
            ("time.now", caller, "ok"), ("job.list", caller, "ok"), ("memory.recall", caller, "ok"),
            ("job.submit", caller, "ok"),
            ("memory.recall", caller, "denied"), ("job.list", caller, "denied"), ("job.submit", caller, "denied"),
            ("time.now", caller, "denied")]
        assert all(REFUSAL.fullmatch(error) for *_, error in audited[LIMIT:])


async def test_a_client_that_keeps_calling_while_refused_is_disconnected(db_path: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """Each refusal is an audit record, so a client that never waits for its retry
    grew the log as fast as it could send (1.4-1.8 GB an hour through one
    connection, decision 0072). Refused more often within a window than the window
    allows (at least MIN_FLOOD times), its connection is ended: the server stops
    reading, says why in one line, exits 1, and the calls it never read are never
    run or recorded."""
    monkeypatch.setenv("GORMES_GATEWAY_RATE", f"{LIMIT}req/600s")
    monkeypatch.setenv("GORMES_GATEWAY_CLIENT_RATE", "off")
    sent = MIN_FLOOD * 50
    stderr = tmp_path / "stderr"
    async with raw_gormes_mcp(db_path, stderr) as raw:
        await pipelined_until_ended(raw, sent)
    assert raw.process.returncode == 1
    last = stderr.read_text().splitlines()[-1]
    assert re.fullmatch(r"gormes: error: the client kept calling while refused \(\d+ refusals within 600s,"
                        r" past GORMES_GATEWAY_RATE\): connection closed; each refusal is audited", last), last
    async with SQLiteEventStore.open(db_path) as store:
        audits = [a for a in await audit_events(store) if a.operation == "time.now"]
    outcomes = [a.outcome for a in audits]
    assert outcomes.count("ok") == LIMIT
    refusals = [a for a in audits if a.outcome == "denied"]
    assert len(refusals) >= MIN_FLOOD
    assert set(outcomes) <= {"ok", "denied", "cancelled"}  # in flight when it ended: cancelled
    assert any(a.error.endswith("the connection closes: it was refused 100 times within 600s") for a in refusals)
    assert len(audits) < sent  # what it sent after the end was never read


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_two_processes_under_two_names_share_one_quota_even_calling_at_once(backend: str, db_path: Path):
    """Two `gormes mcp` processes on one database, their clients named apart (a
    client names itself), each firing calls concurrently: together they are
    served the limit, no more, and every other call is refused."""
    fired = 3 * LIMIT
    async with database(backend, db_path) as (db, open_store):
        async with gormes_mcp(db, env=RATE, client_name="mallory") as one, \
                gormes_mcp(db, env=RATE, client_name="mallory-2") as two:
            lines: list[str] = []

            async def fire(client: Any) -> None:
                lines.append(await attempt(client, "memory__recall", query="anything"))

            async with trio.open_nursery() as nursery:
                for n in range(fired):
                    nursery.start_soon(fire, (one, two)[n % 2])
            # and a third name, after: no fresh quota either
            async with gormes_mcp(db, env=RATE, client_name="a-new-name") as three:
                late = await attempt(three, "time__now")
        assert lines.count("ok") == LIMIT, lines
        assert all(REFUSAL.fullmatch(line) for line in lines if line != "ok"), lines
        assert REFUSAL.fullmatch(late), late
        audited = await outcomes(open_store)
        assert sorted(outcome for _, _, outcome, _ in audited) == ["denied"] * (fired + 1 - LIMIT) + ["ok"] * LIMIT
        assert {who for _, who, _, _ in audited} == {"mcp:mallory", "mcp:mallory-2", "mcp:a-new-name"}


async def test_one_process_renaming_itself_gets_no_fresh_quota(db_path: Path):
    """Reconnecting under a new name each time: the limit is the class's."""
    lines = []
    for n in range(LIMIT + 2):
        async with gormes_mcp(db_path, env=RATE, client_name=f"client-{n}") as client:
            lines.append(await attempt(client, "time__now"))
    assert lines[:LIMIT] == ["ok"] * LIMIT
    assert all(REFUSAL.fullmatch(line) for line in lines[LIMIT:]), lines


# -- what stays open -------------------------------------------------------------------


async def test_the_operators_calls_are_never_limited(db_path: Path, monkeypatch: pytest.MonkeyPatch):
    """With the gateways' window full: an operator's MCP server and its CLI are
    served, as many calls as they make."""
    async with gormes_mcp(db_path, env=RATE) as gateway:
        for _ in range(LIMIT):
            await call_ok(gateway, "time__now")
        assert REFUSAL.fullmatch(await call_refused(gateway, "time__now"))
    async with gormes_mcp(db_path, "--trust", "operator", env=RATE) as operator:
        for _ in range(3 * LIMIT):
            await call_ok(operator, "time__now")
        await call_ok(operator, "approval__list")
    monkeypatch.setenv("GORMES_GATEWAY_RATE", RATE["GORMES_GATEWAY_RATE"])
    for _ in range(2):
        done = run_gormes(db_path, "ops", "call", "time.now")
        assert done.returncode == 0, done.stderr
        assert "unix" in json.loads(done.stdout)
    async with SQLiteEventStore.open(db_path) as store:
        audited = await audit_events(store)
    assert [a.outcome for a in audited if a.trust == "operator"] == ["ok"] * (3 * LIMIT + 3)


async def test_the_refusal_tells_nothing_of_other_clients_calls(db_path: Path):
    """The line names the limit, the setting and when to retry: not who made the
    calls that filled the window, nor what they called with."""
    secret = "the launch codes are 0000"
    async with gormes_mcp(db_path, env=RATE, client_name="alice") as alice:
        await call_ok(alice, "memory__remember", fact=secret)
        for _ in range(LIMIT - 1):
            await call_ok(alice, "memory__recall", query=secret)
    async with gormes_mcp(db_path, env=RATE, client_name="mallory") as mallory:
        line = await call_refused(mallory, "memory__recall", query="launch codes")
    assert REFUSAL.fullmatch(line), line
    assert "alice" not in line and "launch" not in line and "memory" not in line


async def test_unset_the_limit_is_600_a_minute_and_off_turns_it_off(db_path: Path):
    """The default holds a normal client's pace (every call here is served) and
    counts each call; `off` serves past any count and counts none; a limit set
    later counts the calls the window already holds."""
    async with gormes_mcp(db_path) as client:
        for _ in range(2 * LIMIT):
            await call_ok(client, "time__now")
    async with gormes_mcp(db_path, env={"GORMES_GATEWAY_RATE": "off"}) as client:
        for _ in range(2 * LIMIT):
            await call_ok(client, "time__now")
    rate = {"GORMES_GATEWAY_RATE": f"{2 * LIMIT + 1}req/600s", "GORMES_GATEWAY_CLIENT_RATE": "off"}
    async with gormes_mcp(db_path, env=rate) as client:
        await call_ok(client, "time__now")
        line = await call_refused(client, "time__now")
    assert f"at most {2 * LIMIT + 1} calls per 600s" in line and f"GORMES_GATEWAY_RATE={2 * LIMIT + 1}req" in line


@pytest.mark.parametrize("value", ["5tpm", "600rpm,100tpm", "0", "fast", "5rpm/2s", "5req/0s", "0rpm", "2000000rpm"])
def test_a_bad_setting_is_one_line_and_exit_2_before_the_database_is_opened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str):
    monkeypatch.setenv("GORMES_GATEWAY_RATE", value)
    db = tmp_path / "never.db"
    done = run_gormes(db, "mcp", input="")
    line = assert_one_line_error(done)
    assert done.returncode == 2, done.stderr
    assert line.startswith(f"gormes: error: GORMES_GATEWAY_RATE={value!r}: "), line
    assert not db.exists()
