"""Approval gates through the real CLI (decision 0033): an agent job's call waits
for approval with its job parked; the worker process is SIGKILLed while it waits;
`gormes approve` from the CLI resumes the job, a new worker completes it, the tool
ran once and both runs replay exactly. A foreground `gormes run` waits in its
process and is approved from another. Approving what is not pending, or an unknown
id: one line, exit 2, nothing written."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from cli_helpers import assert_job_completes, assert_one_line_error, cli_env, gormes_command, run_gormes

pytestmark = pytest.mark.slow

SCRIPT = {"agents": [{"replies": [
    {"tool_calls": [{"name": "fs.read", "arguments": {"path": "README.md"}}]},
    {"text": "read it"},
]}]}


def query(db: Path, sql: str, *params: object) -> list[tuple]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def env_with(workspace: Path, **extra: str) -> dict[str, str]:
    env = cli_env()
    env.update({"GORMES_WORKSPACE": str(workspace), "GORMES_REQUIRE_APPROVAL": "fs.read", **extra})
    return env


def start_worker(db: Path, workspace: Path) -> subprocess.Popen:
    return subprocess.Popen(
        gormes_command(db, "worker", "--concurrency", "1", "--lease", "1000", "--stall-interval", "200",
                       "--stall-grace", "300", "--no-governor"),
        env=env_with(workspace), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def pending(db: Path) -> list[dict]:
    if not db.exists():
        return []  # the process under test has not made it yet (a read makes none)
    listed = run_gormes(db, "approvals", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)["approvals"]


def wait_for(check, what: str, proc: subprocess.Popen | None = None, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"never: {what}"
        assert proc is None or proc.poll() is None, f"the process exited before: {what}"
        time.sleep(0.05)


def event_count(db: Path) -> int:
    return query(db, "SELECT count(*) FROM events")[0][0]


def test_a_parked_job_survives_its_worker_killed_and_goes_on_when_approved(tmp_path: Path) -> None:
    db, model, workspace = tmp_path / "approvals.db", tmp_path / "model.json", tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("the approved file\n")
    model.write_text(json.dumps(SCRIPT))
    submitted = run_gormes(db, "jobs", "submit", "agent", "--data", json.dumps(
        {"prompt": "read the readme", "model": f"scripted:{model}", "tools": ["fs.read"]}))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()

    worker = start_worker(db, workspace)
    try:
        [approval] = wait_for(lambda: pending(db), "an approval request", worker)
        wait_for(lambda: json.loads(run_gormes(db, "jobs", "get", job_id, "--json").stdout)["status"] == "paused",
                 "the job parked", worker)
    finally:
        worker.send_signal(signal.SIGKILL)  # the worker process is gone while the request waits
        worker.wait()
    assert approval["operation"] == "fs.read" and approval["job_id"] == job_id
    assert "deployment rule 'fs.read'" in approval["why"]
    job = json.loads(run_gormes(db, "jobs", "get", job_id, "--json").stdout)
    assert job["status"] == "paused" and job["lock_token"] is None  # no lease held

    approved = run_gormes(db, "approve", approval["id"], "--reason", "it is only the readme", "--json")
    assert approved.returncode == 0, approved.stderr
    decided = json.loads(approved.stdout)
    assert (decided["status"], decided["decided_by"], decided["resumed_job"]) == ("approved", "operator:cli", job_id)
    # deciding again, or an unknown id: one line, exit 2, nothing written
    before = event_count(db)
    for args in (("approve", approval["id"], "--reason", "again"), ("deny", approval["id"], "--reason", "late"),
                 ("approve", "NO-SUCH-ID", "--reason", "x")):
        refused = run_gormes(db, *args)
        assert refused.returncode == 2
        line = assert_one_line_error(refused)
        assert "not pending" in line or "no approval request" in line, line
    assert event_count(db) == before + 3  # only the three refusals' audit events

    worker = start_worker(db, workspace)
    try:
        assert_job_completes(db, job_id)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    job = json.loads(run_gormes(db, "jobs", "get", job_id, "--json").stdout)
    assert job["result"]["result"] == "read it"
    runs = [json.loads(d)["entry"]["data"]["agent_run"] for (d,) in query(
        db, "SELECT data FROM events WHERE stream = ? AND type = 'job.transcribed' AND data LIKE '%agent_run%' "
        "ORDER BY version", f"job-{job_id}")]
    # the parked attempt's run and the approved one's; under load the workers' 1 s
    # lease lapses (`job.stalled`), which adds an attempt that resumes the last run
    # (three busy loops on two cores did so in two runs of three): the file is still
    # read once, and every run replays exactly
    assert len(runs) >= 2
    audits = [json.loads(d) for (d,) in query(db, "SELECT data FROM events WHERE type = 'audit.operation'")]
    assert sum(1 for a in audits if a["operation"] == "fs.read" and a["outcome"] == "ok") == 1
    assert [a["outcome"] for a in audits if a["operation"] == "approval.approve"] == ["ok", "invalid", "invalid"]
    assert not pending(db)
    for run_id in runs:
        replayed = run_gormes(db, "replay", run_id, "--json")
        report = json.loads(replayed.stdout)
        assert replayed.returncode == 0 and report["exact"], report


def test_a_foreground_run_is_approved_from_another_process(tmp_path: Path) -> None:
    db, model, workspace = tmp_path / "fg.db", tmp_path / "model.json", tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("foreground\n")
    model.write_text(json.dumps(SCRIPT))
    env = env_with(workspace, GORMES_REQUIRE_APPROVAL="")
    run = subprocess.Popen(
        gormes_command(db, "run", "agent", "--prompt", "read", "--model", f"scripted:{model}", "--tools", "fs.read",
                       "--require-approval", "fs.*", "--json"),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        [approval] = wait_for(lambda: pending(db), "an approval request", run)
        assert approval["job_id"] is None
        approved = run_gormes(db, "approve", approval["id"], "--reason", "go")
        assert approved.returncode == 0, approved.stderr
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()  # reaped and its pipes closed: nothing left for a later test to trip on
    assert run.returncode == 0, err
    outcome = json.loads(out)
    assert outcome["status"] == "completed" and outcome["result"] == "read it"
    replayed = run_gormes(db, "replay", outcome["run_id"], "--json")
    assert replayed.returncode == 0 and json.loads(replayed.stdout)["exact"], replayed.stdout
