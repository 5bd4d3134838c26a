"""`gormes run` as a new user meets it: the agent loop without a model is refused
before anything is written; the job tools a foreground run is offered work there
(the job a run submits waits in the store's queue for a worker)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from cli_helpers import assert_one_line_error, run_gormes


def event_types(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [t for (t,) in conn.execute("SELECT type FROM events ORDER BY position")]


def test_the_agent_loop_without_a_model_is_refused_before_a_run_is_recorded(tmp_path):
    db = tmp_path / "gormes.db"
    ran = run_gormes(db, "run", "agent", "--prompt", "hello")
    line = assert_one_line_error(ran)
    assert ran.returncode == 2
    assert "needs a model" in line
    assert "run.started" not in event_types(db)  # the refusal is audited; no run was begun


def test_a_foreground_runs_job_tools_work(tmp_path):
    db = tmp_path / "gormes.db"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"agents": [{"replies": [
        {"tool_calls": [{"name": "job.submit", "arguments": {"name": "echo", "data": {"n": 1}}}]},
        {"text": "submitted"},
    ]}]}))
    ran = run_gormes(db, "run", "agent", "--prompt", "queue it", "--model", f"scripted:{script}", "--json")
    assert ran.returncode == 0, ran.stderr
    with sqlite3.connect(db) as conn:
        (data,) = conn.execute(
            "SELECT data FROM events WHERE type = 'run.tool_called'").fetchone()
    call = json.loads(data)
    assert (call["operation"], call["outcome"]) == ("job.submit", "ok"), call
    listed = run_gormes(db, "jobs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(j["name"], j["status"]) for j in json.loads(listed.stdout)] == [("echo", "waiting")]
