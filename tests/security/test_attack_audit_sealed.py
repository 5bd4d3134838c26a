"""A change and its audit record commit together: a `gormes approve`, `gormes
append`, `gormes import`, `gormes jobs submit`, `gormes cron add`, `gormes run`,
`gormes fork`, `gormes runs resume`, `gormes memory forget` or `gormes skills
promote` SIGKILLed right after its change committed still left its audit record
(an attacker's window: the executor used to append the record after the handler
returned, so a kill there left an approval, events written by hand, a job, a
schedule, a run, a forgotten memory or a promotion that no audit record names).
The first three seal it themselves; the job queue's commands and the actors'
`ask` take the call's seal (gormes/events/audit_seal.py); a run start hands it to
the task that appends `run.started` (gormes/actors/runs/start_record.py); a
redaction (`redact`, `memory forget`) seals it into its last chunk."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from cli_helpers import REPO, cli_env, promotable, rows, run_gormes

from gormes.events.redaction import CHUNK

# Each script kills its own process at the first step after the change's
# transaction committed, then runs the CLI command given.
KILLED_AFTER_COMMIT = {
    "approve": """
import gormes.tools.approvals as approvals
approvals.read_approval = killed  # read right after the deciding transaction
""",
    "append": """
import gormes.tools.log_admin as log_admin
log_admin.EventAppended = killed_now  # built right after the appending transaction
""",
    "import": """
import gormes.tools.log_admin as log_admin
log_admin.EventsImported = killed_now  # built right after the importing transaction
""",
    "submit": """
import gormes.tools.jobs as jobs
jobs.summary = killed_now  # built right after the queue's transaction
""",
    "cron": """
import gormes.tools.cron as cron
cron._view = killed_now  # built right after the schedule's transaction
""",
    "remember": """
import gormes.tools.memory as memory
memory.RememberOutput = killed_now  # built right after the remembering transaction
""",
    "memory admin": """
import gormes.memory.writer as writer
append = writer.MemoryWriter.append

async def appended_then_killed(self, *args, **kwargs):  # right after the writer's transaction
    await append(self, *args, **kwargs)
    killed_now()

writer.MemoryWriter.append = appended_then_killed
""",
    "redact": """
import gormes.projections.redaction as projections
projections.catch_up = killed  # folded again right after the last chunk's transaction
""",
    "redact between chunks": """
import gormes.tools.log_redact as log_redact
redact_in = log_redact.redact_in
chunks = []

def killed_in_the_second(tx, *args, **kwargs):  # in the second chunk's transaction, before its commit
    chunks.append(1)
    if len(chunks) == 2:
        killed_now()
    return redact_in(tx, *args, **kwargs)

log_redact.redact_in = killed_in_the_second
""",
    "feedback": """
import gormes.tools.skills_admin as skills_admin
skills_admin.FeedbackRecorded = killed_now  # built right after the recording transaction
""",
    "select": """
import gormes.tools.skills_admin as skills_admin
skills_admin.Selected = killed_now  # built right after the recording transaction
""",
    "run start": """
import gormes.tools.run_admin as run_admin
run_admin.RunStarter.started = killed_now  # kept right after the run's start committed
""",
    "promote": """
import os, types
import gormes.skillbook.promotion as promotion
promotion.os = types.SimpleNamespace(**vars(os))
promotion.os.replace = killed_now  # the rename right after skill.promoted committed
""",
}
PREAMBLE = """
import os, signal, sys

async def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

def killed_now(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
"""
RUN = """
from gormes.cli.main import main
main(["--db", sys.argv[1], *sys.argv[2:]])
"""


def killed_after_commit(db: Path | str, hook: str, *args: str) -> None:
    script = PREAMBLE + KILLED_AFTER_COMMIT[hook] + RUN
    child = subprocess.run([sys.executable, "-c", script, str(db), *args], env=cli_env(), cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr


def audits_after(db: Path, position: int) -> list[tuple]:
    return rows(db, "SELECT json_extract(data, '$.operation'), json_extract(data, '$.outcome') FROM events"
                    f" WHERE type = 'audit.operation' AND position > {position}")


def ok(db: Path | str, *args: str) -> str:
    done = run_gormes(db, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_approval_killed_after_its_commit_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    request = {"approval_id": "a1", "operation": "payments.send", "arguments": "{}", "args_hash": "0" * 64,
               "caller": "mcp:x", "trust": "gateway", "why": "test", "at": 1}
    ok(db, "append", "approvals", "approval.requested", "--data", json.dumps(request))
    killed_after_commit(db, "approve", "approve", "a1", "--reason", "fine")
    [(decided_at,)] = rows(db, "SELECT position FROM events WHERE type = 'approval.decided'")
    assert audits_after(db, decided_at) == [("approval.approve", "ok")]
    ok(db, "audit", "verify")


def test_an_append_killed_after_its_commit_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    ok(db, "append", "notes-1", "note.added", "--data", '{"text": "a"}')
    killed_after_commit(db, "append", "append", "notes-1", "note.added", "--data", '{"text": "b"}')
    [(written_at,)] = rows(db, "SELECT position FROM events WHERE stream = 'notes-1' AND version = 2")
    assert audits_after(db, written_at) == [("events.append", "ok")]
    ok(db, "audit", "verify")


def test_an_import_killed_after_its_commit_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(
        json.dumps({"stream": f"notes-{i}", "type": "note.added", "data": {"text": str(i)}}) + "\n"
        for i in range(3)
    ))
    ok(db, "append", "notes-x", "note.added", "--data", '{"text": "x"}')  # the database exists
    killed_after_commit(db, "import", "import", str(lines))
    [(last,)] = rows(db, "SELECT max(position) FROM events WHERE stream GLOB 'notes-[0-9]'")
    assert rows(db, "SELECT count(*) FROM events WHERE stream GLOB 'notes-[0-9]'") == [(3,)]
    assert audits_after(db, last) == [("events.import", "ok")]
    ok(db, "audit", "verify")


def test_a_job_submission_killed_after_its_commit_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    ok(db, "jobs", "submit", "first")  # the database and its ledger exist
    killed_after_commit(db, "submit", "jobs", "submit", "second", "--data", '{"n": 2}')
    [(submitted_at,)] = rows(db, "SELECT position FROM events WHERE type = 'job.submitted'"
                                 " AND json_extract(data, '$.name') = 'second'")
    assert audits_after(db, submitted_at) == [("job.submit", "ok")]
    ok(db, "audit", "verify")


def test_a_schedule_added_and_killed_after_its_commit_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    ok(db, "jobs", "submit", "first")
    killed_after_commit(db, "cron", "cron", "add", "nightly", "--schedule", "0 3 * * *", "--job", "echo")
    [(added_at,)] = rows(db, "SELECT position FROM events WHERE stream GLOB 'cron-*'")
    assert audits_after(db, added_at) == [("cron.add", "ok")]
    ok(db, "audit", "verify")


def started_runs(db: Path, expected: int) -> list[tuple[str, int]]:
    started = rows(db, "SELECT stream, position FROM events WHERE type = 'run.started' ORDER BY position")
    assert len(started) == expected, "the run's start was not durable when the call returned"
    return started


def scripted(tmp_path: Path, name: str, replies: list[dict]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"agents": [{"replies": replies}]}))
    return f"scripted:{path}"


def test_a_run_started_and_killed_after_its_start_committed_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    model = scripted(tmp_path, "m", [{"text": "done"}])
    killed_after_commit(db, "run start", "run", "agent", "--prompt", "hi", "--model", model)
    [(_, started_at)] = started_runs(db, 1)
    assert audits_after(db, started_at) == [("run.start", "ok")]
    ok(db, "audit", "verify")


def test_a_fork_killed_after_its_start_committed_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    model = scripted(tmp_path, "m", [{"tool_calls": [{"name": "time.now", "arguments": {}}]}, {"text": "done"}])
    source = json.loads(ok(db, "run", "agent", "--prompt", "hi", "--model", model, "--json"))["run_id"]
    [(first_turn,)] = rows(db, "SELECT min(position) FROM events WHERE type = 'run.llm_turn'")
    killed_after_commit(db, "run start", "fork", source, "--at", str(first_turn), "--yes")
    [_, (_, forked_at)] = started_runs(db, 2)
    assert audits_after(db, forked_at) == [("run.fork", "ok")]
    ok(db, "audit", "verify")


def test_a_resume_killed_after_its_start_committed_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    model = scripted(tmp_path, "m", [{"text": "done"}])
    killed_after_commit(db, "run start", "run", "agent", "--prompt", "hi", "--model", model)
    [(stream, _)] = started_runs(db, 1)  # no end, its process gone: it may be resumed
    killed_after_commit(db, "run start", "runs", "resume", stream.removeprefix("run-"))
    [_, (_, resumed_at)] = started_runs(db, 2)
    assert audits_after(db, resumed_at) == [("run.resume", "ok")]
    ok(db, "audit", "verify")


def test_a_memory_remembered_and_killed_after_its_commit_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    ok(db, "append", "notes-1", "note.added", "--data", '{"text": "a"}')  # the database exists
    remembered = {"fact": "Ada writes programs", "subject": "Ada",
                  "relation": {"subject": "Ada", "predicate": "works with", "object": "Charles"}}
    killed_after_commit(db, "remember", "ops", "call", "memory.remember", json.dumps(remembered))
    written = rows(db, "SELECT type, position FROM events WHERE stream GLOB 'memory-*' ORDER BY position")
    assert [t for t, _ in written] == ["memory.entity_observed"] * 2 + ["memory.relationship_observed",
                                      "memory.entity_observed", "memory.fact_recorded"]
    assert audits_after(db, written[-1][1]) == [("memory.remember", "ok")]
    ok(db, "audit", "verify")


def test_the_operators_memory_commands_killed_after_their_commit_are_audited(tmp_path: Path) -> None:
    """`gormes memory add-fact`, `add-entity`, `relate` and `review` each write one
    append, their audit record sealed into it."""
    db = tmp_path / "g.db"
    ok(db, "append", "notes-1", "note.added", "--data", '{"text": "a"}')  # the database exists
    for args, operation in ((("add-entity", "Ada"), "memory.add_entity"),
                            (("add-fact", "Ada writes programs", "--subject", "Ada"), "memory.add_fact"),
                            (("relate", "Ada", "works with", "Charles"), "memory.relate")):
        killed_after_commit(db, "memory admin", "memory", *args)
        last = rows(db, "SELECT max(position) FROM events WHERE stream GLOB 'memory-*'")[0][0]
        assert audits_after(db, last) == [(operation, "ok")], operation
    remembered_by_a_gateway(db, "Charles builds engines")  # unreviewed
    (fact_id,) = [json.loads(d)["fact_id"] for (d,) in rows(
        db, "SELECT data FROM events WHERE type = 'memory.fact_recorded' AND data LIKE '%Charles builds%'")]
    killed_after_commit(db, "memory admin", "memory", "review", fact_id, "--promote")
    last = rows(db, "SELECT max(position) FROM events WHERE stream GLOB 'memory-*'")[0][0]
    assert audits_after(db, last) == [("memory.review", "ok")]
    ok(db, "audit", "verify")


def test_an_extraction_killed_after_its_commit_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    ok(db, "run", "agent", "--prompt", "I am Ada and I work at Acme",
       "--model", scripted(tmp_path, "m", [{"text": "noted"}]))
    [(stream, _)] = started_runs(db, 1)
    extraction = {"entities": [{"name": "Ada Lovelace", "kind": "person"}], "relationships": [
        {"subject": "Ada Lovelace", "predicate": "works at", "object": "Acme", "turn": "input"}]}
    model = scripted(tmp_path, "x", [{"text": json.dumps(extraction)}])
    killed_after_commit(db, "memory admin", "ops", "call", "memory.extract",
                        json.dumps({"run_id": stream.removeprefix("run-"), "model": model}))
    last = rows(db, "SELECT max(position) FROM events WHERE stream GLOB 'memory-*'")[0][0]
    assert last is not None and audits_after(db, last) == [("memory.extract", "ok")]
    ok(db, "audit", "verify")


def remembered_by_a_gateway(db: Path, fact: str) -> None:
    import trio

    from gormes.events.sqlite import SQLiteEventStore
    from gormes.ops.executor import Executor
    from gormes.ops.spec import Caller
    from gormes.tools.builtin import default_registry

    async def remember() -> None:
        async with SQLiteEventStore.open(db) as store:
            await Executor(default_registry(), store).call(
                "memory.remember", {"fact": fact}, Caller(trust="gateway", id="mcp:x"))

    trio.run(remember)


def noted(tmp_path: Path, db: Path, count: int) -> None:
    """`count` events on stream notes-1."""
    lines = tmp_path / "notes.jsonl"
    lines.write_text("".join(
        json.dumps({"stream": "notes-1", "type": "note.added", "data": {"text": str(i)}}) + "\n" for i in range(count)
    ))
    ok(db, "import", str(lines))


def test_a_redaction_killed_after_its_last_chunk_committed_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    noted(tmp_path, db, CHUNK + 10)  # two chunks
    killed_after_commit(db, "redact", "redact", "--stream", "notes-1", "--reason", "erasure request")
    [_, (last_chunk,)] = rows(db, "SELECT position FROM events WHERE type = 'log.redacted' ORDER BY position")
    redacted = "SELECT count(*) FROM events WHERE stream = 'notes-1' AND json_extract(data, '$.redacted') IS NOT NULL"
    assert rows(db, redacted) == [(CHUNK + 10,)]
    assert audits_after(db, last_chunk) == [("log.redact", "ok")]
    ok(db, "audit", "verify")


def test_a_redaction_killed_between_its_chunks_claims_no_success(tmp_path: Path) -> None:
    """Its record is sealed with the last chunk, never with the first: a call killed
    midway leaves the first chunk's `log.redacted` record, and no `ok`."""
    db = tmp_path / "g.db"
    noted(tmp_path, db, CHUNK + 10)
    [(before,)] = rows(db, "SELECT max(position) FROM events")
    killed_after_commit(db, "redact between chunks", "redact", "--stream", "notes-1", "--reason", "erasure request")
    assert len(rows(db, "SELECT position FROM events WHERE type = 'log.redacted'")) == 1
    assert audits_after(db, before) == []
    ok(db, "audit", "verify")


def a_run(tmp_path: Path, db: Path) -> str:
    model = scripted(tmp_path, "m", [{"text": "done"}])
    return json.loads(ok(db, "run", "agent", "--prompt", "hi", "--model", model, "--json"))["run_id"]


def test_skill_feedback_killed_after_its_commit_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    killed_after_commit(db, "feedback", "skills", "feedback", a_run(tmp_path, db), "replay-forensics", "good")
    [(fed_at,)] = rows(db, "SELECT position FROM events WHERE type = 'skill.feedback'")
    assert audits_after(db, fed_at) == [("skills.feedback", "ok")]
    ok(db, "audit", "verify")


def test_a_skill_selection_killed_after_its_commit_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    run_id = a_run(tmp_path, db)
    killed_after_commit(db, "select", "skills", "route", "why did my run fail", "--candidates", "--run", run_id)
    [(selected_at,)] = rows(db, "SELECT max(position) FROM events WHERE type = 'skill.selected'")
    assert audits_after(db, selected_at) == [("skills.select", "ok")]
    ok(db, "audit", "verify")


SECRET = "Ada keeps the spare key under the blue flowerpot"


def remembered_and_noted(tmp_path: Path, db: Path | str) -> str:
    """The id of a fact the operator added, whose text `CHUNK + 10` notes on
    notes-1 repeat (outside its scope: forgetting it there needs --everywhere),
    so that forgetting it redacts in two chunks."""
    fact = json.loads(ok(db, "memory", "add-fact", SECRET, "--json"))["fact_id"]
    lines = tmp_path / "notes.jsonl"
    lines.write_text("".join(
        json.dumps({"stream": "notes-1", "type": "note.added", "data": {"text": f"{i}: {SECRET}"}}) + "\n"
        for i in range(CHUNK + 10)
    ))
    ok(db, "import", str(lines))
    return fact


def test_a_forget_killed_after_its_last_chunk_committed_is_audited(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    fact = remembered_and_noted(tmp_path, db)
    killed_after_commit(db, "redact", "memory", "forget", fact, "--everywhere", "--reason", "asked to")
    assert len(rows(db, "SELECT position FROM events WHERE type = 'memory.forgotten'")) == 1
    [_, (last_chunk,)] = rows(db, "SELECT position FROM events WHERE type = 'log.redacted' ORDER BY position")
    redacted = "SELECT count(*) FROM events WHERE stream = 'notes-1' AND json_extract(data, '$.redacted') IS NOT NULL"
    assert rows(db, redacted) == [(CHUNK + 10,)]
    assert audits_after(db, last_chunk) == [("memory.forget", "ok")]
    ok(db, "audit", "verify")


def test_a_forget_killed_between_its_chunks_claims_no_success(tmp_path: Path) -> None:
    """Its record is sealed with the last chunk, never with `memory.forgotten` or the
    first chunk: a call killed midway leaves those, and no `ok`."""
    db = tmp_path / "g.db"
    fact = remembered_and_noted(tmp_path, db)
    [(before,)] = rows(db, "SELECT max(position) FROM events")
    killed_after_commit(db, "redact between chunks", "memory", "forget", fact, "--everywhere", "--reason", "asked to")
    assert len(rows(db, "SELECT position FROM events WHERE type = 'memory.forgotten'")) == 1
    assert len(rows(db, "SELECT position FROM events WHERE type = 'log.redacted'")) == 1
    assert audits_after(db, before) == []
    ok(db, "audit", "verify")


def test_a_promotion_killed_after_its_event_committed_is_audited(tmp_path: Path) -> None:
    """Killed before the rename: `skill.promoted` and its `ok` record committed, the
    SKILL.md as it was (the rename comes only after the event is durable); promoting
    again rewrites it."""
    db = tmp_path / "g.db"
    root = promotable(tmp_path)
    skill = root / "alpha" / "SKILL.md"
    before = skill.read_text()
    killed_after_commit(db, "promote", "skills", "promote", "alpha", "--skills-dir", str(root))
    [(promoted_at,)] = rows(db, "SELECT position FROM events WHERE type = 'skill.promoted'")
    assert audits_after(db, promoted_at) == [("skills.promote", "ok")]
    assert skill.read_text() == before
    ok(db, "audit", "verify")
    ok(db, "skills", "promote", "alpha", "--skills-dir", str(root))
    assert "status: proven\n" in skill.read_text()
    assert len(rows(db, "SELECT position FROM events WHERE type = 'skill.promoted'")) == 2
