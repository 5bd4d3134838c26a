"""One audited door: every state change from the CLI, cron and MCP goes through
the operation executor and leaves exactly one audit record naming its caller and
trust class; a refusal is audited too; a gateway cannot reach the operator's
operations (decision 0019).

The CLI runs in subprocesses against real SQLite files, `gormes mcp` through the
real `mcp` SDK client, cron through the real scheduler on a real file."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import REPO, assert_one_line_error, run_gormes
from mcp_helpers import call_refused, gormes_mcp, tool_names

from gormes.actors.cron.scheduler import CronBook, CronScheduler
from gormes.actors.jobs.queue import JobQueue
from gormes.events.open import open_store
from gormes.events.runs import RunCompleted, RunStarted, run_stream
from gormes.events.sqlite_log import SQLiteLog
from gormes.tools import cron as cron_ops
from gormes.tools import jobs_admin, memory_admin, skills_admin
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, OperationDenied

SKILL_FIXTURES = REPO / "tests" / "skills" / "fixtures" / "good"
EVIDENCE = ("evidence:\n  - {date: 2026-01-05, type: run, ref: run-1}\n"
            "  - {date: 2026-01-06, type: run, ref: run-2}\n  - {date: 2026-01-07, type: review, ref: bob}")


# -- reading what a command left ----------------------------------------------------


def _rows(db: Path) -> list[tuple[int, str, str, str]]:
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT position, stream, type, data FROM events ORDER BY position").fetchall()
    finally:
        conn.close()


class Log:
    """The events of a database, and what one command added to them."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.seen = _rows(db)

    def run(self, *args: str) -> tuple[object, list[dict], list[tuple]]:
        """Run the CLI; (the result, the audit records added, the other events added).
        Asserts that nothing recorded before was changed or lost."""
        done = run_gormes(self.db, *args)
        after = _rows(self.db)
        # only a redaction (memory forget, decision 0026) may change an earlier row: into a tombstone
        assert len(after) >= len(self.seen) and all(
            new == old or (new[:3] == old[:3] and new[3].startswith('{"redacted":'))
            for old, new in zip(self.seen, after)), "an earlier event was changed or lost"
        added = after[len(self.seen):]
        self.seen = after
        audits = [json.loads(data) for _, _, kind, data in added if kind == "audit.operation"]
        others = [(stream, kind) for _, stream, kind, _ in added if kind != "audit.operation"]
        return done, audits, others

    def ok(self, *args: str) -> tuple[str, dict]:
        """A command that must succeed with exactly one audit record; (stdout, the record)."""
        done, audits, _ = self.run(*args)
        assert done.returncode == 0, done.stderr
        assert len(audits) == 1, (args, audits)
        return done.stdout.strip(), audits[0]

    def refused(self, *args: str) -> tuple[str, dict, list[tuple]]:
        """A command that must fail in one line, audited; (the line, the record, other events)."""
        done, audits, others = self.run(*args)
        line = assert_one_line_error(done)
        assert len(audits) == 1, (args, audits)
        return line, audits[0], others


def _by_operator(record: dict, operation: str, outcome: str = "ok") -> None:
    assert (record["operation"], record["trust"], record["caller"], record["outcome"]) == (
        operation, "operator", "cli", outcome), record
    assert record["input_sha256"]


def _rebuild_check(db: Path) -> None:
    check = run_gormes(db, "projections", "rebuild", "--check")
    assert check.returncode == 0, check.stdout + check.stderr


def _add_run(db: Path, run_id: str) -> None:
    log = SQLiteLog(db)
    try:
        log.append_now(run_stream(run_id), [RunStarted(run_id=run_id, handler="agent", handler_version="v")])
        log.append_now(run_stream(run_id), [RunCompleted()])
    finally:
        log.close()


# -- every CLI state change, one operator audit record -------------------------------


def test_every_job_command_that_changes_state_is_one_operator_audit_record(tmp_path: Path):
    log = Log(tmp_path / "door.db")
    job_id, record = log.ok("jobs", "submit", "echo", "--data", '{"a": 1}')
    _by_operator(record, "job.submit")
    for verb, operation in (("pause", "job.pause"), ("resume", "job.resume")):
        out, record = log.ok("jobs", verb, job_id)
        _by_operator(record, operation)
    message_id, record = log.ok("jobs", "send", job_id, "--payload", '{"hi": 1}')
    _by_operator(record, "job.send")
    out, record = log.ok("jobs", "cancel", job_id)
    assert out == f"{job_id} cancelled"
    _by_operator(record, "job.cancel")
    replayed, record = log.ok("jobs", "replay", job_id)
    _by_operator(record, "job.replay")
    out, record = log.ok("jobs", "prune", "--older-than", "0s", "--dry-run")
    _by_operator(record, "job.prune")
    # a refusal by the operation is audited as well, and writes nothing else
    line, record, others = log.refused("jobs", "retry", replayed)
    assert "cannot retry" in line and others == []
    _by_operator(record, "job.retry", "invalid")
    line, record, others = log.refused("jobs", "cancel", "NO-SUCH-JOB")
    assert "NO-SUCH-JOB" in line and others == []
    _by_operator(record, "job.cancel", "invalid")
    _rebuild_check(log.db)


def test_jobs_get_shows_who_submitted_the_job(tmp_path: Path):
    log = Log(tmp_path / "door.db")
    job_id, _ = log.ok("jobs", "submit", "echo")
    shown = run_gormes(log.db, "jobs", "get", job_id)
    assert shown.returncode == 0, shown.stderr
    assert "submitter         operator cli" in shown.stdout.splitlines()
    as_json = json.loads(run_gormes(log.db, "jobs", "get", job_id, "--json").stdout)
    assert as_json["submitter"] == {"trust": "operator", "caller": "cli", "scope": None}


def test_every_cron_command_that_changes_state_is_one_operator_audit_record(tmp_path: Path):
    log = Log(tmp_path / "door.db")
    out, record = log.ok("cron", "add", "tidy", "--schedule", "*/5 * * * *", "--job", "echo")
    assert out.startswith("added tidy: */5 * * * * -> echo on queue default; next fire 20")
    _by_operator(record, "cron.add")
    for verb in ("pause", "resume", "remove"):
        out, record = log.ok("cron", verb, "tidy")
        _by_operator(record, f"cron.{verb}")
    line, record, others = log.refused("cron", "pause", "ghost")
    assert "no schedule named 'ghost'" in line and others == []
    _by_operator(record, "cron.pause", "invalid")
    _rebuild_check(log.db)


def test_every_memory_command_that_changes_state_is_one_operator_audit_record(tmp_path: Path):
    log = Log(tmp_path / "door.db")
    fact, record = log.ok("memory", "add-fact", "Ada drinks tea", "--subject", "Ada", "--scope", "chat:a")
    _by_operator(record, "memory.add_fact")
    newer, record = log.ok("memory", "add-fact", "Ada drinks coffee", "--supersedes", fact, "--scope", "chat:a")
    _by_operator(record, "memory.add_fact")
    out, record = log.ok("memory", "add-entity", "Bob", "--kind", "person")
    _by_operator(record, "memory.add_entity")
    edge, record = log.ok("memory", "relate", "Ada", "works at", "Acme")
    _by_operator(record, "memory.relate")
    out, record = log.ok("memory", "review", edge, "--reject")
    assert out == f"{edge} rejected"
    _by_operator(record, "memory.review")
    out, record = log.ok("memory", "forget", newer, "--reason", "wrong")
    _by_operator(record, "memory.forget")
    line, record, others = log.refused("memory", "forget", "f_nope")
    assert "f_nope" in line and others == []
    _by_operator(record, "memory.forget", "invalid")
    _rebuild_check(log.db)


def test_every_skills_command_that_records_is_one_operator_audit_record(tmp_path: Path):
    root = tmp_path / "skills"
    shutil.copytree(SKILL_FIXTURES, root)
    skill = root / "alpha" / "SKILL.md"
    skill.write_text(skill.read_text().replace("evidence: []", EVIDENCE))
    log = Log(tmp_path / "door.db")
    _add_run(log.db, "r1")
    log.seen = _rows(log.db)
    out, record = log.ok("skills", "promote", "alpha", "--skills-dir", str(root))
    assert out.startswith("alpha: candidate -> proven")
    _by_operator(record, "skills.promote")
    out, record = log.ok("skills", "route", "alpha thing", "--run", "r1", "--skills-dir", str(root))
    assert "recorded skill.selected" in out
    _by_operator(record, "skills.select")
    out, record = log.ok("skills", "feedback", "r1", "alpha", "good", "--skills-dir", str(root))
    _by_operator(record, "skills.feedback")
    line, record, others = log.refused("skills", "feedback", "ghost-run", "alpha", "bad", "--skills-dir", str(root))
    assert "no run 'ghost-run'" in line and others == []
    _by_operator(record, "skills.feedback", "invalid")
    # routing without --run records nothing, so it is no action and is not audited
    done, audits, others = log.run("skills", "route", "alpha thing", "--skills-dir", str(root))
    assert done.returncode == 0 and audits == [] and others == []
    _rebuild_check(log.db)


# -- 17 (part): a supersedes that names nothing ---------------------------------------


def test_add_fact_superseding_a_fact_that_does_not_exist_is_refused(tmp_path: Path):
    log = Log(tmp_path / "door.db")
    log.ok("memory", "add-fact", "Ada drinks tea", "--scope", "chat:a")
    line, record, others = log.refused("memory", "add-fact", "Ada drinks coffee", "--supersedes", "NO-SUCH",
                                       "--scope", "chat:a")
    assert line == "gormes: error: memory: --supersedes 'NO-SUCH': no such fact"
    assert run_gormes(log.db, "memory", "add-fact", "x", "--supersedes", "NO-SUCH").returncode == 2
    assert others == []  # no fact recorded
    _by_operator(record, "memory.add_fact", "invalid")
    _rebuild_check(log.db)


def test_a_fact_may_not_supersede_a_fact_of_another_scope(tmp_path: Path):
    # Superseding marks the old fact stale wherever it is: from chat:b, an operator
    # command could otherwise hide what chat:a's recall returns.
    log = Log(tmp_path / "door.db")
    victim, _ = log.ok("memory", "add-fact", "Ada drinks tea", "--scope", "chat:a")
    line, record, others = log.refused("memory", "add-fact", "Ada drinks nothing", "--supersedes", victim,
                                       "--scope", "chat:b")
    assert "is in scope 'chat:a', not 'chat:b'" in line and others == []
    recalled = json.loads(run_gormes(log.db, "recall", "tea", "--scope", "chat:a", "--json").stdout)
    assert [hit.get("stale") for hit in recalled["hits"] if hit.get("id") == victim] in ([False], [None], [])
    _rebuild_check(log.db)


# -- 11 (part): numbers too large for any job option ------------------------------------


@pytest.mark.parametrize("flag, value", [
    ("--priority", "1e23"), ("--max-attempts", "1e20"), ("--delay", "9223372036854775807"),
    ("--priority", "-1e30"), ("--priority", "99999999999999999999999999"), ("--timeout", "1e400"),
])
def test_huge_job_options_are_one_line_and_exit_2(tmp_path: Path, flag: str, value: str):
    log = Log(tmp_path / "door.db")
    log.ok("jobs", "submit", "echo")
    done, audits, others = log.run("jobs", "submit", "echo", flag, value)
    assert_one_line_error(done)
    assert done.returncode == 2
    assert others == []  # no job
    assert [a["outcome"] for a in audits] == ["invalid"]
    _rebuild_check(log.db)


@pytest.mark.parametrize("value", ["1.5", "nan", "inf", "0x10", "ten", "1" * 41])
def test_a_number_that_is_no_whole_number_is_one_line_before_anything_runs(tmp_path: Path, value: str):
    db = tmp_path / "door.db"
    done = run_gormes(db, "jobs", "submit", "echo", "--priority", value)
    line = assert_one_line_error(done)
    assert done.returncode == 2 and "--priority" in line
    assert not db.exists()


# -- cron and the daemon: system, audited in the fire's own transaction ---------------------


async def test_a_cron_fire_is_a_system_audit_record_and_a_system_submitter(tmp_path: Path):
    db = tmp_path / "cron.db"
    now = [1_700_000_000.0]
    async with open_store(db) as store:
        await CronBook(store, clock=lambda: now[0]).add("tick", "* * * * *", "echo", {"n": 1})
        scheduler = CronScheduler(await JobQueue.open(store), clock=lambda: now[0])
        now[0] += 120
        (fired,) = await scheduler.tick()
        assert await scheduler.tick() == []  # once per fire time
    records = [json.loads(data) for _, _, kind, data in _rows(db) if kind == "audit.operation"]
    assert [(r["operation"], r["trust"], r["caller"], r["job_id"], r["outcome"]) for r in records] == [
        ("job.submit", "system", "cron:tick", fired.job_id, "ok")]
    assert records[0]["input_sha256"] and records[0]["digest"]  # sealed onto the day's chain
    job = json.loads(run_gormes(db, "jobs", "get", fired.job_id, "--json").stdout)
    assert job["submitter"] == {"trust": "system", "caller": "cron:tick", "scope": None}
    assert "submitter         system cron:tick" in run_gormes(db, "jobs", "get", fired.job_id).stdout
    _rebuild_check(db)


# -- attacks of our own -------------------------------------------------------------------


ADMIN_SPECS = (*jobs_admin.SPECS, *cron_ops.SPECS, *memory_admin.SPECS, *skills_admin.SPECS)


@pytest.mark.parametrize("spec", ADMIN_SPECS, ids=lambda s: s.name)
def test_the_operators_operations_are_never_offered_to_a_model(spec):
    assert spec.trust == frozenset({"operator"}) and not spec.prompt_visible
    for trust in ("gateway", "child-agent", "system"):
        assert spec.name not in {t.name for t in default_registry().tool_schemas(trust)}


@pytest.mark.parametrize("trust", ["gateway", "child-agent", "system"])
async def test_no_other_trust_class_may_call_the_operators_operations(tmp_path: Path, trust: str):
    # Straight at the executor, past any MCP filtering: the spec's own trust check
    # refuses, before the handler, and each refusal is audited as denied.
    db = tmp_path / "door.db"
    async with open_store(db) as store:
        executor = Executor(default_registry(), store, workspace=tmp_path, jobs=await JobQueue.open(store))
        caller = Caller(trust=trust, id="intruder")
        for spec in ADMIN_SPECS:
            with pytest.raises(OperationDenied):
                await executor.call(spec.name, {}, caller)
    records = [json.loads(data) for _, _, kind, data in _rows(db) if kind == "audit.operation"]
    assert [(r["operation"], r["trust"], r["outcome"], r["allowed"]) for r in records] == [
        (spec.name, trust, "denied", False) for spec in ADMIN_SPECS]
    assert [kind for _, _, kind, _ in _rows(db) if kind != "audit.operation"] == []


async def test_a_gateway_over_mcp_cannot_add_a_schedule_that_would_fire_as_system(tmp_path: Path):
    db = tmp_path / "door.db"
    async with gormes_mcp(db) as client:
        served = await tool_names(client)
        assert not served & {"cron__add", "memory__add_fact", "memory__forget", "memory__review",
                             "skills__promote", "job__retry", "job__replay", "job__prune"}
        line = await call_refused(client, "cron__add", name="escalate", schedule="* * * * *", job="agent",
                                  data={"prompt": "run as system"})
        assert "cron" in line
        await call_refused(client, "memory__add_fact", text="the gateway says: trusted")
    assert run_gormes(db, "cron", "list", "--json").stdout.strip() == "[]"
    records = [json.loads(data) for _, _, kind, data in _rows(db) if kind == "audit.operation"]
    # not served to a gateway at all: unknown to its registry, so audited by the wire name asked for
    assert [(r["operation"], r["trust"], r["outcome"], r["allowed"]) for r in records] == [
        ("cron__add", "gateway", "denied", False), ("memory__add_fact", "gateway", "denied", False)]
    assert not [kind for _, _, kind, _ in _rows(db) if kind.startswith(("cron.", "memory."))]


async def test_a_gateway_cannot_sign_a_message_into_a_job_it_does_not_parent(tmp_path: Path):
    # The CLI's `jobs send` signs as the operator (it has no --sender to forge);
    # over MCP the gateway signs as itself and the queue refuses it.
    db = tmp_path / "door.db"
    log = Log(db)
    victim, _ = log.ok("jobs", "submit", "echo", "--delay", "600000")
    async with gormes_mcp(db) as client:
        await call_refused(client, "job__send", id=victim, payload={"from": "your parent, honest"})
    inbox = json.loads(run_gormes(db, "jobs", "inbox", victim, "--json").stdout)
    assert inbox == []
    records = [json.loads(data) for _, _, kind, data in _rows(db) if kind == "audit.operation"]
    assert (records[-1]["operation"], records[-1]["trust"], records[-1]["allowed"]) == ("job.send", "gateway", True)
    assert records[-1]["outcome"] != "ok"
    log.seen = _rows(db)
    out, record = log.ok("jobs", "send", victim, "--payload", '{"from": "the operator"}')
    assert [m["sender"] for m in json.loads(run_gormes(db, "jobs", "inbox", victim, "--json").stdout)] == ["operator"]
    _rebuild_check(db)


@pytest.mark.parametrize("link", ["folder", "file"])
def test_skills_promote_will_not_write_through_a_symlink_out_of_the_skills_folder(tmp_path: Path, link: str):
    outside = tmp_path / "outside" / "alpha"
    outside.mkdir(parents=True)
    text = (SKILL_FIXTURES / "alpha" / "SKILL.md").read_text().replace("evidence: []", EVIDENCE)
    (outside / "SKILL.md").write_text(text)
    root = tmp_path / "skills"
    root.mkdir()
    if link == "folder":
        (root / "alpha").symlink_to(outside, target_is_directory=True)
    else:
        (root / "alpha").mkdir()
        (root / "alpha" / "SKILL.md").symlink_to(outside / "SKILL.md")
    log = Log(tmp_path / "door.db")
    line, record, others = log.refused("skills", "promote", "alpha", "--skills-dir", str(root))
    assert "symlink" in line
    assert others == []  # no skill.promoted
    _by_operator(record, "skills.promote", "denied")
    assert (outside / "SKILL.md").read_text() == text
    assert sorted(p.name for p in outside.iterdir()) == ["SKILL.md"]


async def test_the_keys_of_gormes_top_steer_jobs_through_the_audited_door(tmp_path: Path):
    # `gormes top`'s pause, resume and cancel keys called the queue directly.
    from gormes.dashboard.app import TopApp
    from gormes.dashboard.keys import Action

    db = tmp_path / "top.db"
    async with open_store(db) as store:
        queue = await JobQueue.open(store)
        job = await queue.submit("echo")
        app = TopApp(store, queue, None, None, None, fps=10)  # type: ignore[arg-type]
        for kind in ("pause", "resume", "cancel"):
            await app.perform(Action(kind=kind, job_id=job.id))
        await app.perform(Action(kind="pause", job_id=job.id))  # refused: it is cancelled
        assert "cannot" in app.ui.message
    records = [json.loads(data) for _, _, kind, data in _rows(db) if kind == "audit.operation"]
    assert [(r["operation"], r["trust"], r["caller"], r["outcome"]) for r in records] == [
        ("job.pause", "operator", "cli", "ok"), ("job.resume", "operator", "cli", "ok"),
        ("job.cancel", "operator", "cli", "ok"), ("job.pause", "operator", "cli", "invalid")]


def test_on_postgresql_too_each_cli_change_and_refusal_is_one_operator_audit_record(tmp_path: Path):
    from pg_helpers import fresh_schema, url_for_schema

    with fresh_schema() as schema:
        url = url_for_schema(schema)

        def audits() -> list[dict]:
            done = run_gormes(url, "audit", "export")
            assert done.returncode == 0, done.stderr
            return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

        read = run_gormes(url, "jobs", "stats")  # a read creates no schema, and is not audited
        assert read.returncode == 1 and "no gormes database" in read.stderr, read.stderr
        first = run_gormes(url, "jobs", "submit", "echo")  # the first write creates the schema
        assert first.returncode == 0, first.stderr
        assert [(a["operation"], a["trust"], a["caller"], a["outcome"]) for a in audits()] == [
            ("job.submit", "operator", "cli", "ok")]
        steps = [
            (("jobs", "cancel", "NO-SUCH-JOB"), "job.cancel", "invalid"),
            (("jobs", "submit", "echo", "--priority", "1e23"), "job.submit", "invalid"),
            (("cron", "add", "tidy", "--schedule", "@daily", "--job", "echo"), "cron.add", "ok"),
            (("memory", "add-fact", "Ada drinks tea", "--supersedes", "NO-SUCH"), "memory.add_fact", "invalid"),
        ]
        for args, operation, outcome in steps:
            before = audits()
            done = run_gormes(url, *args)
            if outcome == "ok":
                assert done.returncode == 0, done.stderr
            else:
                assert_one_line_error(done)
            added = audits()[len(before):]
            assert [(a["operation"], a["trust"], a["caller"], a["outcome"]) for a in added] == [
                (operation, "operator", "cli", outcome)], args
        facts = run_gormes(url, "events", "--type", "memory.fact_recorded", "--json")
        assert facts.returncode == 0 and facts.stdout.strip() == ""
        check = run_gormes(url, "projections", "rebuild", "--check")
        assert check.returncode == 0, check.stdout + check.stderr


async def test_the_operator_replaying_a_gateways_job_does_not_launder_it_into_operator_work(tmp_path: Path):
    from mcp_helpers import call_ok

    db = tmp_path / "door.db"
    async with gormes_mcp(db) as client:
        submitted = await call_ok(client, "job__submit", name="echo", data={"x": 1})
        await call_ok(client, "job__cancel", id=submitted["id"])
    assert submitted["submitter"]["trust"] == "gateway"
    log = Log(db)
    replayed, record = log.ok("jobs", "replay", submitted["id"])
    _by_operator(record, "job.replay")  # the operator's act is audited as the operator's...
    job = json.loads(run_gormes(db, "jobs", "get", replayed, "--json").stdout)
    assert job["submitter"] == submitted["submitter"]  # ...but the work stays the gateway's
    _rebuild_check(db)


async def test_even_an_mcp_server_run_as_operator_never_serves_the_operators_own_operations(tmp_path: Path):
    # `gormes mcp --trust operator` hands every MCP client the operator's class; the
    # operations only the CLI may call stay out of reach (operator-only: never prompt-visible).
    db = tmp_path / "door.db"
    admin = {spec.name.replace(".", "__") for spec in ADMIN_SPECS}
    async with gormes_mcp(db, "--trust", "operator") as client:
        assert not await tool_names(client) & admin
        await call_refused(client, "cron__add", name="x", schedule="* * * * *", job="echo")
        await call_refused(client, "memory__forget", id="f_x")
    records = [json.loads(data) for _, _, kind, data in _rows(db) if kind == "audit.operation"]
    assert [(r["operation"], r["trust"], r["allowed"]) for r in records] == [
        ("cron__add", "operator", False), ("memory__forget", "operator", False)]
    assert [kind for _, _, kind, _ in _rows(db) if kind != "audit.operation"] == []
