"""Crash: a worker process is SIGKILLed while an agent job's subagent waits for a
slow model turn. Another worker takes the stalled job over; its attempt resumes
the parent run and, when the parent spawns the subagent again, resumes the
subagent too: the subagent's finished turn and its tool's side effect are
replayed from the log, not done again, and the job's tokens are what the model's
answers used."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from cli_helpers import assert_job_completes, cli_env, gormes_command, run_gormes

pytestmark = pytest.mark.slow


def script(slow_ms: int) -> dict:
    return {"agents": [
        {"match": "CHILD", "replies": [
            {"tool_calls": [{"name": "memory.remember", "arguments": {"fact": "the child's step"}}]},
            {"text": "child answer", "delay_ms": slow_ms},
        ]},
        {"replies": [
            {"tool_calls": [{"name": "agent.spawn", "arguments": {"prompt": "CHILD help"}}]},
            {"text": "parent done"},
        ]},
    ]}


def start_worker(db: Path) -> subprocess.Popen:
    return subprocess.Popen(
        gormes_command(db, "worker", "--concurrency", "2", "--lease", "1000",
                       "--stall-interval", "200", "--stall-grace", "300", "--no-governor"),
        env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def query(db: Path, sql: str, *params: object) -> list[tuple]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def run_events(db: Path, run_id: str) -> list[tuple[str, dict]]:
    rows = query(db, "SELECT type, data FROM events WHERE stream = ? ORDER BY version", f"run-{run_id}")
    return [(t, json.loads(d)) for t, d in rows]


def spawned_child(db: Path, run_id: str) -> str:
    (child,) = [d["child_run_id"] for t, d in run_events(db, run_id) if t == "run.child_spawned"]
    return child


def test_a_worker_killed_while_a_subagent_works_resumes_parent_and_subagent(tmp_path: Path) -> None:
    db, model = tmp_path / "agents.db", tmp_path / "model.json"
    model.write_text(json.dumps(script(slow_ms=600_000)))
    submitted = run_gormes(db, "jobs", "submit", "agent", "--data",
                           json.dumps({"prompt": "work", "model": f"scripted:{model}"}))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()

    worker = start_worker(db)
    try:
        deadline = time.monotonic() + 60
        # the subagent's tool ran and its next (slow) turn is under way
        while not query(db, "SELECT 1 FROM events WHERE type = 'run.tool_called' AND data LIKE '%memory.remember%'"):
            assert time.monotonic() < deadline, "the subagent never called its tool"
            assert worker.poll() is None, "the worker exited"
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()

    model.write_text(json.dumps(script(slow_ms=0)))  # the model answers at once from now on
    worker = start_worker(db)
    try:
        assert_job_completes(db, job_id)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)

    job = json.loads(run_gormes(db, "jobs", "get", job_id, "--json").stdout)
    assert job["result"]["result"] == "parent done"
    # two attempts started; the crashed one was a stall, not a spent attempt
    assert (job["attempts_started"], job["stalled_counter"], job["attempts_made"]) == (2, 1, 1)
    first, second = [json.loads(d)["entry"]["data"]["agent_run"] for (d,) in query(
        db, "SELECT data FROM events WHERE stream = ? AND type = 'job.transcribed' "
        "AND data LIKE '%agent_run%' ORDER BY version", f"job-{job_id}")]
    assert run_events(db, second)[0][1]["resumed_from"]["run_id"] == first
    old_child, new_child = spawned_child(db, first), spawned_child(db, second)
    # the killed attempt's run and subagent were cut off with no end; the next
    # attempt recorded them as cancelled, saying why, so neither reads as running
    for cut in (first, old_child):
        end_type, end = run_events(db, cut)[-1]
        assert end_type == "run.cancelled" and end["reason"].startswith("cut off"), (end_type, end)
    listed = {r["run_id"]: r for r in json.loads(run_gormes(db, "runs", "list", "--json").stdout)}
    assert [listed[r]["status"] for r in (first, old_child, second, new_child)] == [
        "cancelled", "cancelled", "completed", "completed"]
    replayed_first = run_gormes(db, "replay", first, "--json")
    report = json.loads(replayed_first.stdout)
    assert replayed_first.returncode == 0 and report["exact"] and report["status"] == "cancelled", report
    assert report["children"][0]["status"] == "cancelled"
    later_child = run_events(db, new_child)
    assert later_child[0][1]["resumed_from"]["run_id"] == old_child
    assert later_child[-1][0] == "run.completed" and later_child[-1][1]["result"] == "child answer"

    # the tool's side effect happened once: one audited execution
    audits = [json.loads(d) for (d,) in query(db, "SELECT data FROM events WHERE type = 'audit.operation'")]
    assert sum(1 for a in audits if a["operation"] == "memory.remember" and a["outcome"] == "ok") == 1
    # each model answer shows up once per distinct request (copies repeat it), and the
    # job's tokens are what those answers used
    answered: dict[str, dict] = {}
    for run_id in (first, second, old_child, new_child):
        for t, d in run_events(db, run_id):
            if t == "run.llm_turn":
                answered.setdefault(d["request_hash"], d["usage"])
    assert len(answered) == 4  # parent: spawn, final; child: tool, answer
    assert job["tokens"] == {k: sum(u.get(k, 0) for u in answered.values()) for k in ("input", "output", "cache_read", "cache_write", "reasoning")}

    replayed = run_gormes(db, "replay", second, "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
