"""An `agent` job whose data the agent cannot run (an unknown field, no prompt)
is not retried as if the failure were transient (issue 19, item 4): `jobs submit`
refuses it in one line (exit 2) before anything is queued, and one queued by
another door (the job.submit operation itself) goes dead on its first attempt."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import assert_one_line_error, run_gormes, running_worker


def ok(db: Path, *args: str) -> str:
    done = run_gormes(db, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_jobs_submit_refuses_agent_data_with_an_unknown_field(tmp_path: Path):
    db = tmp_path / "g.db"
    done = run_gormes(db, "jobs", "submit", "agent", "--data", '{"prompt": "hi", "promt": "typo"}')
    assert "agent job data: Object contains unknown field `promt`" in assert_one_line_error(done)
    assert done.returncode == 2
    missing = run_gormes(db, "jobs", "submit", "agent", "--data", '{"system": "no prompt"}')
    assert "missing required field `prompt`" in assert_one_line_error(missing)
    assert not db.exists()  # refused before anything was opened, let alone queued


def test_queued_bad_agent_data_is_dead_after_one_attempt(tmp_path: Path):
    db = tmp_path / "g.db"
    submit = {"name": "agent", "data": {"prompt": "hi", "promt": "typo"}}
    job = json.loads(ok(db, "ops", "call", "job.submit", json.dumps(submit)))["id"]
    with running_worker(db):
        assert ok(db, "jobs", "wait", job, "--timeout", "60").strip() == "dead"
    got = json.loads(ok(db, "jobs", "get", job, "--json"))
    assert got["attempts_made"] == 1 and got["max_attempts"] == 3
    assert "unknown field `promt`" in got["error"]
    runs = json.loads(ok(db, "runs", "list", "--json"))
    assert runs == []  # refused before a run was recorded
