"""`gormes jobs` and `gormes worker` through the real CLI, with real worker processes."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import create_database, assert_one_line_error, cli_env, digest, gormes_command, run_gormes

JOB_FIELDS = {
    "id", "name", "queue", "status", "priority", "data", "result", "error", "attempts_made",
    "attempts_started", "stalled_counter", "max_attempts", "max_stalled", "parent_id", "depth",
    "progress", "tokens", "created_at", "started_at", "finished_at", "lock_until",
    "delay_until", "idempotency_key",
}


@pytest.fixture
def jobs_db(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


@pytest.fixture
def worker(jobs_db: Path) -> Iterator[subprocess.Popen]:
    # Create the database and ledger first: two processes opening a brand-new file at
    # once can still race (see the report: "database is locked" in ledger setup).
    create_database(jobs_db)
    proc = subprocess.Popen(
        gormes_command(jobs_db, "worker", "--concurrency", "4", "--shutdown-grace", "500"),
        env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def ok(db: Path, *args: str) -> str:
    done = run_gormes(db, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def get(db: Path, job_id: str) -> dict:
    return json.loads(ok(db, "jobs", "get", job_id, "--json"))


def test_submit_then_a_worker_completes_it_and_get_shows_every_field(jobs_db: Path, worker):
    job_id = ok(jobs_db, "jobs", "submit", "echo", "--data", '{"x": 1}', "--priority", "3")
    assert ok(jobs_db, "jobs", "wait", job_id, "--timeout", "60") == "completed"
    assert json.loads(ok(jobs_db, "jobs", "wait", job_id, "--json")) == {
        "id": job_id, "status": "completed", "result": {"x": 1}, "error": None}
    job = get(jobs_db, job_id)
    assert JOB_FIELDS <= set(job)
    assert (job["status"], job["result"], job["priority"]) == ("completed", {"x": 1}, 3)
    assert job["tokens"] == {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0, "reasoning": 0}
    listed = json.loads(ok(jobs_db, "jobs", "list", "--status", "completed", "--json"))
    assert [j["id"] for j in listed] == [job_id]
    stats = json.loads(ok(jobs_db, "jobs", "stats", "--json"))
    assert stats["by_status"]["completed"] == 1


def test_submit_json_carries_the_options(jobs_db: Path):
    job = json.loads(ok(jobs_db, "jobs", "submit", "sleep", "--data", '{"ms": 1}', "--queue", "slow",
                        "--delay", "60000", "--max-attempts", "5", "--idempotency-key", "k1",
                        "--json"))
    assert (job["status"], job["queue"], job["max_attempts"], job["idempotency_key"]) == (
        "delayed", "slow", 5, "k1")
    again = json.loads(ok(jobs_db, "jobs", "submit", "sleep", "--idempotency-key", "k1", "--json"))
    assert again["id"] == job["id"] and again["coalesced"] is True


def test_pause_resume_and_cancel_a_running_job_through_the_cli(jobs_db: Path, worker):
    job_id = ok(jobs_db, "jobs", "submit", "sleep", "--data", '{"ms": 600000}')
    _wait_status(jobs_db, job_id, "active")
    assert ok(jobs_db, "jobs", "pause", job_id) == f"{job_id} paused"
    paused = get(jobs_db, job_id)
    assert paused["attempts_made"] == 0 and paused["error"] is None
    ok(jobs_db, "jobs", "resume", job_id)
    _wait_status(jobs_db, job_id, "active")
    assert ok(jobs_db, "jobs", "cancel", job_id) == f"{job_id} cancelled"
    assert ok(jobs_db, "jobs", "wait", job_id, "--timeout", "30") == "cancelled"


def test_a_timeout_kills_the_handler_and_the_job_is_dead(jobs_db: Path, worker):
    job_id = ok(jobs_db, "jobs", "submit", "sleep", "--data", '{"ms": 600000}', "--timeout", "300")
    assert ok(jobs_db, "jobs", "wait", job_id, "--timeout", "60") == "dead"
    job = get(jobs_db, job_id)
    assert (job["error"], job["attempts_made"]) == ("timeout exceeded", 1)


def test_send_inbox_retry_replay_and_prune(jobs_db: Path, worker):
    job_id = ok(jobs_db, "jobs", "submit", "echo", "--data", '{"a": {"b": 1}}')
    assert ok(jobs_db, "jobs", "wait", job_id, "--timeout", "60") == "completed"
    new_id = ok(jobs_db, "jobs", "replay", job_id, "--data", '{"a": {"c": 2}}')
    assert ok(jobs_db, "jobs", "wait", new_id, "--timeout", "60") == "completed"
    assert get(jobs_db, new_id)["result"] == {"a": {"b": 1, "c": 2}}
    delayed = ok(jobs_db, "jobs", "submit", "echo", "--delay", "600000")
    message_id = ok(jobs_db, "jobs", "send", delayed, "--payload", '{"hello": true}')
    inbox = json.loads(ok(jobs_db, "jobs", "inbox", delayed, "--json"))
    assert [(m["id"], m["payload"], m["read_at"]) for m in inbox] == [(message_id, {"hello": True}, None)]
    dry = json.loads(ok(jobs_db, "jobs", "prune", "--older-than", "0s", "--dry-run", "--json"))
    assert sorted(dry["ids"]) == sorted([job_id, new_id])
    assert get(jobs_db, job_id)["status"] == "completed"  # dry run removed nothing


def test_worker_stops_on_sigterm_and_releases_what_is_still_running(jobs_db: Path, worker):
    job_id = ok(jobs_db, "jobs", "submit", "sleep", "--data", '{"ms": 600000}')
    _wait_status(jobs_db, job_id, "active")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    job = get(jobs_db, job_id)
    assert (job["status"], job["attempts_made"]) == ("waiting", 0)


@pytest.mark.parametrize("args, says", [
    (("jobs", "get", "NOPE"), "no job"),
    (("jobs", "submit", "echo", "--data", "{bad"), "malformed JSON"),
    (("jobs", "submit", "echo", "--max-stalled", "1.5"), "--max-stalled must be a whole number"),
    (("jobs", "prune", "--older-than", "soon"), "not a duration"),
    (("worker", "--import", "no_such_handlers_module"), "cannot import handlers"),
    (("worker", "--concurrency", "0"), "--concurrency must be"),
])
def test_bad_input_is_one_clear_line_and_changes_nothing(jobs_db: Path, args, says):
    ok(jobs_db, "jobs", "submit", "echo")
    before = digest(jobs_db)
    done = run_gormes(jobs_db, *args)
    assert says in assert_one_line_error(done)
    assert digest(jobs_db) == before


@pytest.mark.parametrize("args, says", [
    (("jobs", "cancel", "NOPE"), "NOPE"),
    (("jobs", "submit", "   "), "name"),
    (("jobs", "retry", "NOPE"), "NOPE"),
    # a number out of its range is the operation's to refuse (gormes/actors/jobs/vocabulary.py)
    (("jobs", "submit", "echo", "--delay", "-1"), "delay_ms must be between 0 and"),
    (("jobs", "submit", "echo", "--backoff-jitter", "2"), "backoff jitter must be between 0 and 1"),
    (("jobs", "submit", "echo", "--max-attempts", "0"), "max_attempts must be between 1 and 1000"),
])
def test_a_refused_operation_is_one_line_and_only_its_audit_record_is_written(jobs_db: Path, args, says):
    # These reach the operation (decision 0019), so the refusal is audited: the
    # audit record is the only thing written.
    ok(jobs_db, "jobs", "submit", "echo")
    before = _events(jobs_db)
    done = run_gormes(jobs_db, *args)
    assert says in assert_one_line_error(done)
    after = _events(jobs_db)
    assert after[: len(before)] == before
    # `allowed` is whether the handler ran: an option out of range is refused by the
    # input's caps before it (decision 0088); a name or a job the queue refuses, in it
    ran = not any(flag in args for flag in ("--delay", "--backoff-jitter", "--max-attempts"))
    assert [(e[1], json.loads(e[2])["caller"], json.loads(e[2])["allowed"]) for e in after[len(before):]] == [
        ("audit.operation", "cli", ran)]


def test_max_stalled_is_clamped_into_its_range_as_on_every_door(jobs_db: Path):
    job_id = ok(jobs_db, "jobs", "submit", "echo", "--max-stalled", "101")
    assert get(jobs_db, job_id)["max_stalled"] == 100


def _events(db: Path) -> list[tuple]:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT position, type, data FROM events ORDER BY position").fetchall()
    finally:
        conn.close()


def test_a_handler_file_that_fails_to_import_is_one_line(jobs_db: Path, tmp_path: Path):
    broken = tmp_path / "broken_handlers.py"
    broken.write_text("import gormes\nraise RuntimeError('missing API key')\n")
    done = run_gormes(jobs_db, "worker", "--import", str(broken))
    assert "RuntimeError: missing API key" in assert_one_line_error(done)
    assert not jobs_db.exists()


def _wait_status(db: Path, job_id: str, status: str) -> None:
    """Poll the CLI until the job shows `status` (each call is a fresh process)."""
    for _ in range(600):
        if get(db, job_id)["status"] == status:
            return
    raise AssertionError(f"job {job_id} never became {status}: {get(db, job_id)}")


def test_a_plain_worker_runs_agent_jobs_without_an_import(jobs_db: Path, worker, tmp_path: Path):
    # `run.submit` (and MCP's run__submit) queue `agent` jobs: every worker must run them.
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"agents": [{"replies": [{"text": "all done"}]}]}))
    data = json.dumps({"prompt": "say done", "model": f"scripted:{script}"})
    job_id = ok(jobs_db, "jobs", "submit", "agent", "--data", data)
    assert ok(jobs_db, "jobs", "wait", job_id, "--timeout", "60") == "completed", get(jobs_db, job_id)
    job = get(jobs_db, job_id)
    assert job["result"]["result"] == "all done"
    shown = json.loads(ok(jobs_db, "runs", "show", job["result"]["run_id"], "--json"))
    assert shown["status"] == "completed"
