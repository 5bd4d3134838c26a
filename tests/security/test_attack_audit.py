"""Attacks on the audit trail (issue 14, holes 9, 15, 16 and the hash chain).

Every refusal, from every entry point, must be an audit record; an outcome must
say what kind of failure it was; a replay must refuse a recording that does not
agree with itself; and the audit trail must show any record forged, edited,
deleted, moved or swapped, through `gormes audit verify` and the doctor.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from cli_helpers import REPO, assert_one_line_error, run_gormes
from mcp_helpers import audit_events, call_ok, gormes_mcp
from pg_helpers import backend, reopen_store, store_on_both_backends  # noqa: F401 (fixtures)

from gormes.actors.jobs.state import InvalidJob, JobNotFound
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.runs.context import ToolCallFailed, run_handler
from gormes.actors.runs.manager import RunManager
from gormes.events.audit_chain import GENESIS, record_digest, verify_chains
from gormes.events.audit import OperationAudited
from gormes.events.codec import default_codec
from gormes.events.runs import RunToolCalled, run_stream
from gormes.events.sqlite import SQLiteEventStore
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller

FIXTURES = REPO / "replay_fixtures"
HANDLERS = str(FIXTURES / "handlers.py")
OPERATOR = Caller(trust="operator", id="cli")
GATEWAY = Caller(trust="gateway", id="gw-1")
DAY_MS = 86_400_000
NOW_MS = 1_796_000_000_000  # a fixed day: 2026-11-30


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gormes.db"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "README.md").write_text("gormes\n")
    return root


def script(tmp_path: Path, *replies: dict[str, Any]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"agents": [{"replies": list(replies)}]}))
    return f"scripted:{path}"


def call(name: str, arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


async def audits(store: Any) -> list[Any]:
    return [r for r in await store.read_all(types=["audit.operation"])]


def verify(db: Path, *args: str) -> Any:
    return run_gormes(db, "audit", "verify", *args)


def assert_nothing_lost(db: Path) -> None:
    done = run_gormes(db, "projections", "rebuild", "--check")
    assert done.returncode == 0, done.stdout + done.stderr


# -- hole 9: refusals inside a run are audit records ---------------------------------


@run_handler("test.attack_audit_refusals")
async def refusing_handler(ctx: Any, input: Any) -> list[str]:
    """Asks for a tool outside its allowlist, an unknown one, one with arguments
    that are not JSON, then an allowed one."""
    outcomes = []
    for name, arguments in [("shell.run", {"argv": ["true"]}), ("no.such.tool", {}),
                            ("fs.read", "{not json"), ("fs.read", {"path": "README.md"})]:
        try:
            await ctx.tool(name, arguments)
            outcomes.append("ok")
        except ToolCallFailed as exc:
            outcomes.append(exc.outcome)
    return outcomes


async def test_every_refusal_inside_a_run_is_audited_with_its_run_record(db_path, workspace):
    """Seen failing before the fix: no audit event for any of the three refusals."""
    async with SQLiteEventStore.open(db_path) as store:
        executor = Executor(default_registry(), store, workspace=workspace, shell_enabled=True)
        async with RunManager.open(store, executor=executor) as runs:
            outcome = await runs.run("test.attack_audit_refusals", {}, tools=["fs.read"])
        assert outcome.status == "completed", outcome
        run_records = [r for r in await store.read_stream(run_stream(outcome.run_id)) if r.type == "run.tool_called"]
        audit = {r.position: r for r in await audits(store)}
    assert outcome.result == ["denied", "denied", "error", "ok"]
    assert [r.event.outcome for r in run_records] == ["denied", "denied", "error", "ok"]
    for record in run_records:
        # the audit record sits right before its run record: one transaction, one commit
        mine = audit[record.position - 1].event
        assert isinstance(mine, OperationAudited)
        assert mine.run_id == outcome.run_id and mine.trust == "operator"
        assert mine.operation == record.event.operation
        assert mine.digest is not None
    refused = [audit[r.position - 1].event for r in run_records[:3]]
    assert [(e.allowed, e.outcome) for e in refused] == [(False, "denied"), (False, "denied"), (False, "invalid")]
    assert refused[0].audit_kind == "shell.exec" and refused[1].audit_kind is None
    assert all("not allowed for this run" in e.error for e in refused[:2])
    assert refused[2].input_sha256 == run_records[2].event.args_hash
    assert len(audit) == 4
    assert verify(db_path).returncode == 0
    assert_nothing_lost(db_path)


async def test_a_run_with_no_tools_at_all_still_audits_what_it_refused(db_path):
    async with SQLiteEventStore.open(db_path) as store:
        async with RunManager.open(store, executor=None) as runs:
            outcome = await runs.run("test.attack_audit_refusals", {})
        events = [r.event for r in await audits(store)]
    assert outcome.result == ["denied", "denied", "error", "denied"]
    assert [(e.operation, e.allowed, e.outcome, e.run_id) for e in events] == [
        ("shell.run", False, "denied", outcome.run_id), ("no.such.tool", False, "denied", outcome.run_id),
        ("fs.read", False, "invalid", outcome.run_id), ("fs.read", False, "denied", outcome.run_id)]


async def test_an_mcp_call_to_a_tool_not_served_is_audited(db_path):
    async with gormes_mcp(db_path) as client:
        result = await client.call_tool("shell.run", {"argv": ["true"]})
        assert result.is_error
        result = await client.call_tool("no.such.tool", {})
        assert result.is_error
    async with SQLiteEventStore.open(db_path) as store:
        events = await audit_events(store)
    refused = [(e.operation, e.trust, e.allowed, e.outcome) for e in events]
    assert ("shell.run", "gateway", False, "denied") in refused
    assert ("no.such.tool", "gateway", False, "denied") in refused
    assert verify(db_path).returncode == 0


async def test_a_denied_mcp_call_with_a_10_mb_argument_is_audited_by_digest_not_bytes(db_path):
    """Own attack: a gateway floods the audit trail through a refused call."""
    big = "A" * (10 * 1024 * 1024)
    async with gormes_mcp(db_path) as client:
        result = await client.call_tool("no.such.tool", {"blob": big})
        assert result.is_error
        await call_ok(client, "time.now")
    async with SQLiteEventStore.open(db_path) as store:
        events = await audit_events(store)
    refused = [e for e in events if e.operation == "no.such.tool"]
    assert len(refused) == 1 and not refused[0].allowed
    assert refused[0].input_sha256 is not None and len(refused[0].input_sha256) == 64
    biggest = sqlite3.connect(db_path).execute(
        "SELECT max(length(data)) FROM events WHERE type = 'audit.operation'").fetchone()[0]
    assert biggest < 2000
    assert verify(db_path).returncode == 0


async def test_a_100_kb_tool_name_over_mcp_is_audited_cut_to_200_characters(db_path):
    """Own attack: the name, unlike the arguments, is recorded as given; it is capped."""
    async with gormes_mcp(db_path) as client:
        result = await client.call_tool("x" * 100_000, {})
        assert result.is_error
    async with SQLiteEventStore.open(db_path) as store:
        (event,) = await audit_events(store)
    assert (event.allowed, event.outcome, len(event.operation)) == (False, "denied", 200)
    assert len(event.error or "") <= 300
    assert verify(db_path).returncode == 0


# -- hole 15: outcomes by the error's class ----------------------------------------------


async def test_bad_job_input_is_audited_as_invalid_not_error(db_path):
    """Seen failing before the fix: InvalidJob and JobNotFound were audited as `error`."""
    async with SQLiteEventStore.open(db_path) as store:
        executor = Executor(default_registry(), store, jobs=await JobQueue.open(store))
        with pytest.raises(InvalidJob, match="no-such-job"):
            await executor.call("job.submit", {"name": "demo.echo", "options": {"parent_id": "no-such-job"}}, OPERATOR)
        with pytest.raises(JobNotFound):
            await executor.call("job.get", {"id": "missing"}, OPERATOR)
        events = [r.event for r in await audits(store)]
    assert [(e.operation, e.allowed, e.outcome) for e in events] == [
        ("job.submit", True, "invalid"), ("job.get", True, "invalid")]
    assert events[0].error.startswith("InvalidJob")


# -- hole 16: a recording that does not agree with itself is refused ----------------------


def edited_fixture(tmp_path: Path, name: str, stream: str, old: str, new: str) -> tuple[Path, int]:
    """The fixture with `old` replaced by `new` in `stream`'s first tool call, and
    that event's position."""
    text = (FIXTURES / f"{name}.jsonl").read_text()
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if f'"stream":"{stream}"' in line and '"run.tool_called"' in line]
    assert hits
    assert old in lines[hits[0]]
    lines[hits[0]] = lines[hits[0]].replace(old, new, 1)
    out = tmp_path / f"{name}-edited.jsonl"
    out.write_text("".join(lines))
    return out, json.loads(lines[hits[0]])["position"]


def test_replay_file_refuses_edited_tool_arguments(tmp_path):
    """Seen failing before the fix: `exact: ... events reproduced`, exit 0."""
    edited, position = edited_fixture(tmp_path, "subagents", "run-subagents-2", '\\"path\\":\\".\\"', '\\"path\\":\\"/etc\\"')
    done = run_gormes(tmp_path / "none.db", "replay", "--file", str(edited), "--import", HANDLERS)
    line = assert_one_line_error(done)
    assert done.returncode == 1
    assert f"position {position} " in line and "arguments" in line and "args_hash" in line


def test_replay_file_refuses_an_edited_grandchild_run(tmp_path):
    """Own attack: the edit hides in a subagent's subagent, two levels down."""
    edited, position = edited_fixture(tmp_path, "subagents", "run-subagents-3", '\\"pattern\\":\\"replay\\"', '\\"pattern\\":\\"secret\\"')
    done = run_gormes(tmp_path / "none.db", "replay", "subagents-1", "--file", str(edited), "--import", HANDLERS)
    line = assert_one_line_error(done)
    assert done.returncode == 1
    assert "run 'subagents-3'" in line and f"position {position} " in line


def test_replay_from_the_database_refuses_edited_tool_arguments(tmp_path):
    """Seen failing before the fix: the edited run replayed `exact` from the log."""
    db = tmp_path / "runs.db"
    assert run_gormes(db, "import", str(FIXTURES / "subagents.jsonl")).returncode == 0
    with sqlite3.connect(db) as conn:
        [(position,)] = conn.execute(
            "SELECT position FROM events WHERE stream = 'run-subagents-2' AND type = 'run.tool_called'").fetchall()
        changed = conn.execute(
            "UPDATE events SET data = replace(data, '\\\"path\\\":\\\".\\\"', '\\\"path\\\":\\\"/etc\\\"') "
            "WHERE position = ?", (position,)).rowcount
    assert changed == 1
    done = run_gormes(db, "replay", "subagents-1", "--import", HANDLERS)
    line = assert_one_line_error(done)
    assert done.returncode == 1 and f"position {position}" in line and "arguments" in line


# -- the hash chain ---------------------------------------------------------------------


async def audited_db(db: Path, calls: int = 4, *, days: int = 1) -> None:
    """`calls` audited calls a day for `days` days, through the real executor."""
    clock = {"now": NOW_MS / 1000}
    async with SQLiteEventStore.open(db) as store:
        executor = Executor(default_registry(), store, clock=lambda: clock["now"])
        for day in range(days):
            clock["now"] = (NOW_MS + day * DAY_MS) / 1000
            for i in range(calls):
                if i % 2:
                    with pytest.raises(Exception):
                        await executor.call("shell.run", {"argv": ["true"]}, GATEWAY)
                else:
                    await executor.call("time.now", {}, OPERATOR)


def audit_rows(db: Path) -> list[tuple[int, str, int, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT position, stream, version, data FROM events WHERE type = 'audit.operation' ORDER BY position"
        ).fetchall()


def broken(db: Path) -> list[dict]:
    done = verify(db, "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    return [d for d in map(json.loads, done.stdout.splitlines()) if not d["intact"]]


def doctor_chain(db: Path) -> dict:
    done = run_gormes(db, "doctor", "--json", "--offline")
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    return checks["audit.chain"]


async def test_an_intact_trail_verifies_and_prints_its_heads(db_path):
    await audited_db(db_path, days=2)
    done = verify(db_path, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    days = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(d["day"], d["records"], d["sealed"], d["intact"]) for d in days] == [
        ("2026-11-30", 4, 4, True), ("2026-12-01", 4, 4, True)]
    last = audit_rows(db_path)[-1]
    assert days[1]["head"] == msgspec.json.decode(last[3])["digest"]
    assert verify(db_path, "--since", "2026-12-01").stdout.startswith("2026-12-01: intact")
    assert doctor_chain(db_path)["status"] == "ok"
    bad = verify(db_path, "--since", "yesterday")
    assert_one_line_error(bad)
    assert bad.returncode == 2


async def test_a_record_forged_by_raw_sql_is_detected(db_path):
    """Seen failing before the fix: no chain, no `audit verify`: undetectable."""
    await audited_db(db_path)
    position, stream, version, data = audit_rows(db_path)[-1]
    forged = msgspec.json.decode(data)
    forged.update(operation="shell.run", allowed=True, outcome="ok", caller="cli", trust="operator")
    forged.pop("digest", None)
    forged.pop("prev", None)
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "INSERT INTO events (stream, version, type, type_version, data, recorded_at) "
            "SELECT stream, version + 1, type, type_version, ?, recorded_at FROM events WHERE position = ?",
            (json.dumps(forged), position),
        )
    [day] = broken(db_path)
    assert day["first_break"]["version"] == version + 1 and "unsealed" in day["first_break"]["reason"]
    assert doctor_chain(db_path)["status"] == "fail"


async def test_a_forged_record_that_claims_a_digest_is_detected(db_path):
    """Own attack: the forger links `prev` correctly but cannot know what verify recomputes
    unless they recompute it themselves (out of scope, see decision 0018)."""
    await audited_db(db_path)
    position, stream, version, data = audit_rows(db_path)[-1]
    forged = msgspec.json.decode(data)
    forged.update(prev=forged["digest"], operation="fs.write", digest="f" * 64)
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "INSERT INTO events (stream, version, type, type_version, data, recorded_at) "
            "SELECT stream, version + 1, type, type_version, ?, recorded_at FROM events WHERE position = ?",
            (json.dumps(forged), position),
        )
    [day] = broken(db_path)
    assert "digest does not match" in day["first_break"]["reason"]


async def test_a_crafted_import_is_detected(db_path, tmp_path):
    """Seen failing before the fix (no chain). The crafted line claims a denied call was allowed."""
    await audited_db(db_path)
    _, stream, _, data = audit_rows(db_path)[1]
    crafted = msgspec.json.decode(data)
    crafted.update(allowed=True, outcome="ok")
    line = {"position": 1, "stream": stream, "version": 1, "type": "audit.operation", "schema_version": 1,
            "recorded_at": 0.0, "data": crafted}
    jsonl = tmp_path / "crafted.jsonl"
    jsonl.write_text(json.dumps(line) + "\n")
    done = run_gormes(db_path, "import", str(jsonl))
    if done.returncode != 0:  # the import refused audit records outright: as good
        assert_one_line_error(done)
        assert verify(db_path).returncode == 0
        return
    [day] = broken(db_path)
    assert day["first_break"]["version"] == 5


@pytest.mark.parametrize("how", ["allowed flipped", "error erased", "deleted", "moved to another day", "swapped"])
async def test_an_edited_deleted_moved_or_swapped_record_is_detected(db_path, how):
    """`allowed flipped`, `moved to another day` and `swapped` are own attacks."""
    await audited_db(db_path, days=2)
    rows = audit_rows(db_path)
    position, stream, version, data = rows[1]  # a denied shell.run
    event = msgspec.json.decode(data)
    with sqlite3.connect(db_path) as conn:
        if how == "allowed flipped":
            event["allowed"] = True
            conn.execute("UPDATE events SET data = ? WHERE position = ?", (json.dumps(event), position))
        elif how == "error erased":
            event["error"], event["outcome"] = None, "ok"
            conn.execute("UPDATE events SET data = ? WHERE position = ?", (json.dumps(event), position))
        elif how == "deleted":
            conn.execute("DELETE FROM events WHERE position = ?", (position,))
        elif how == "moved to another day":
            other = rows[-1][1]
            conn.execute("UPDATE events SET stream = ?, version = 5 WHERE position = ?", (other, position))
        else:
            a, b = rows[1][0], rows[2][0]
            conn.execute("UPDATE events SET version = -1 WHERE position = ?", (a,))
            conn.execute("UPDATE events SET version = ? WHERE position = ?", (rows[1][2], b))
            conn.execute("UPDATE events SET version = ? WHERE position = ?", (rows[2][2], a))
    days = broken(db_path)
    assert days and days[0]["first_break"] is not None
    assert "2026-11-30" in {d["day"] for d in days}
    assert doctor_chain(db_path)["status"] == "fail"
    text = verify(db_path)
    assert "BROKEN at position" in text.stdout


async def test_a_foreign_event_on_an_audit_stream_breaks_the_chain(db_path):
    """Own attack: `gormes append` of a note onto today's audit stream (refused by H4's
    change; if it lands anyway, the chain shows it)."""
    await audited_db(db_path)
    stream = audit_rows(db_path)[0][1]
    done = run_gormes(db_path, "append", stream, "note.added", "--data", '{"text": "nothing to see"}')
    if done.returncode == 0:
        [day] = broken(db_path)
        assert "on an audit stream" in day["first_break"]["reason"]
    else:
        assert verify(db_path).returncode == 0


async def test_sealing_is_atomic_across_two_stores_on_one_database(store):
    """Two processes' stores auditing onto the same day at once: one unbroken chain
    (each seal reads and appends inside the writer's transaction), on both backends."""
    async with reopen_store(store) as other:
        executors = [Executor(default_registry(), s, clock=lambda: NOW_MS / 1000) for s in (store, other)]

        async def hammer(executor: Executor) -> None:
            for _ in range(15):
                await executor.call("time.now", {}, OPERATOR)

        async with trio.open_nursery() as nursery:
            for executor in executors:
                nursery.start_soon(hammer, executor)
                nursery.start_soon(hammer, executor)
    [day] = await chains(store)
    assert (day.records, day.sealed, day.intact) == (60, 60, True), day


async def test_a_run_tool_call_and_its_sealed_audit_commit_together_on_both_backends(store, workspace, tmp_path):
    model = script(tmp_path, {"tool_calls": [call("fs.read", {"path": "README.md"}), call("shell.run", {})]},
                   {"text": "done"})
    executor = Executor(default_registry(), store, workspace=workspace)
    async with RunManager.open(store, executor=executor) as runs:
        outcome = await runs.run("agent", {"prompt": "p"}, model=model, tools=["fs.read"])
    run_records = [r for r in await store.read_stream(run_stream(outcome.run_id)) if isinstance(r.event, RunToolCalled)]
    audit = {r.position: r for r in await audits(store)}
    assert len(run_records) == 2
    for record in run_records:
        sealed = audit[record.position - 1]
        assert sealed.event.digest == record_digest(sealed.event, sealed.stream, sealed.version)
    assert audit[run_records[0].position - 1].event.prev == GENESIS


async def chains(store: Any) -> list[Any]:
    return await store.read_with(lambda log: verify_chains(getattr(log, "sql", None) or log.conn, default_codec))


def test_legacy_records_before_the_chain_still_verify(tmp_path):
    """A database written before the chain: its days are reported unsealed, not broken."""
    db = tmp_path / "old.db"
    legacy = {"type": "audit.operation", "operation": "time.now", "audit_kind": "time.read", "caller": "cli",
              "trust": "operator", "allowed": True, "outcome": "ok", "duration_ms": 1.0, "at": NOW_MS}
    line = {"position": 1, "stream": "audit-2026-11-30", "version": 1, "type": "audit.operation",
            "schema_version": 1, "recorded_at": 0.0, "data": legacy}
    (tmp_path / "legacy.jsonl").write_text(json.dumps(line) + "\n")
    done = run_gormes(db, "import", str(tmp_path / "legacy.jsonl"))
    if done.returncode != 0:
        pytest.skip("gormes import refuses audit records: no legacy database can be made this way")
    ok = verify(db)
    assert ok.returncode == 0, ok.stdout
    assert "1 written before the chain" in ok.stdout


async def test_verify_and_the_doctor_catch_an_edit_on_postgresql():
    from gormes.events.postgres import PostgresEventStore
    from pg_helpers import PG_URL, admin, fresh_schema, url_for_schema

    with fresh_schema() as schema:
        async with PostgresEventStore.open(PG_URL, schema=schema, poll_interval=0.05) as store:
            executor = Executor(default_registry(), store, clock=lambda: NOW_MS / 1000)
            await executor.call("time.now", {}, OPERATOR)
            with pytest.raises(Exception):
                await executor.call("shell.run", {"argv": ["true"]}, GATEWAY)
            await executor.call("time.now", {}, OPERATOR)
        url = url_for_schema(schema)
        intact = run_gormes(url, "audit", "verify", "--json")
        assert intact.returncode == 0, intact.stdout + intact.stderr
        assert json.loads(intact.stdout)["sealed"] == 3
        admin(f'UPDATE "{schema}".events SET data = jsonb_set(data::jsonb, \'{{allowed}}\', \'true\')::text '
              "WHERE type = 'audit.operation' AND version = 2"
              if _data_is_text(schema) else
              f'UPDATE "{schema}".events SET data = jsonb_set(data, \'{{allowed}}\', \'true\') '
              "WHERE type = 'audit.operation' AND version = 2")
        done = run_gormes(url, "audit", "verify", "--json")
        assert done.returncode == 1, done.stdout + done.stderr
        day = json.loads(done.stdout)
        assert day["first_break"]["version"] == 2 and "digest does not match" in day["first_break"]["reason"]
        assert doctor_chain(url)["status"] == "fail"


def _data_is_text(schema: str) -> bool:
    from pg_helpers import admin

    [(kind,)] = admin("SELECT data_type FROM information_schema.columns WHERE table_schema = %s "
                      "AND table_name = 'events' AND column_name = 'data'", (schema,))
    return kind != "jsonb"


async def test_a_seal_rolled_back_mid_batch_leaves_no_hole_in_the_chain(store):
    """Own attack (on the per-process heads): calls whose own record is refused
    (a stale expected version) roll their seal back inside a group commit full of
    others; the chain must skip them, on both backends."""
    from gormes.events.audit_chain import append_sealed
    from gormes.errors import ConcurrencyError
    from gormes.events.notes import NoteAdded
    from gormes.events.store import AppendRequest
    from gormes.ops.executor import refusal_request

    refused = []

    async def one(i: int) -> None:
        audit = refusal_request("no.such.tool", None, "{}", GATEWAY, f"call {i}", at=NOW_MS)
        stale = 5 if i % 7 == 3 else None  # a stream that is never at version 5
        try:
            await append_sealed(store, audit, [AppendRequest(f"notes-{i}", [NoteAdded(text="x")], stale)])
        except ConcurrencyError:
            refused.append(i)

    for _ in range(2):
        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(one, i)
    [day] = await chains(store)
    assert refused and len(refused) == 2 * len([i for i in range(40) if i % 7 == 3])
    assert (day.records, day.intact) == (80 - len(refused), True), day
