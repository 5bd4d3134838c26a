"""The reads that price or show runs go on after a run was redacted (an attacker's
finding: once a job's run was redacted, `jobs get` and `top --once` failed with a
traceback, since a redacted model turn has no seq, and `runs show` of a parent
whose child was redacted said the child did not exist). A redacted turn's usage
is gone, so the cost it was part of is unknown (null); a redacted child shows as
such in its parent's tree."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import rows, run_gormes, running_worker

SPAWNING = {"model": "scripted", "agents": [
    {"match": "Role: child", "replies": [{"text": "child done"}]},
    {"replies": [{"tool_calls": [{"name": "agent.spawn", "arguments": {"prompt": "Role: child"}}]},
                 {"text": "parent done"}]},
]}


def ok(db: Path, *args: str) -> str:
    done = run_gormes(db, *args, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_ids(db: Path) -> dict[int, str]:
    found = rows(db, "SELECT json_extract(data, '$.run_id'), json_extract(data, '$.depth')"
                     " FROM events WHERE type = 'run.started'")
    return {depth: run_id for run_id, depth in found}


def test_a_redacted_child_shows_as_redacted_in_its_parents_tree(tmp_path: Path):
    db, script = tmp_path / "g.db", tmp_path / "s.json"
    script.write_text(json.dumps(SPAWNING))
    ok(db, "run", "agent", "--prompt", "Role: parent", "--model", f"scripted:{script}")
    ids = run_ids(db)
    ok(db, "redact", "--stream", f"run-{ids[1]}", "--reason", "erasure request")
    shown = json.loads(ok(db, "runs", "show", ids[0], "--tree", "--json"))
    assert shown["status"] == "completed" and shown["tree_cost"] is None
    assert [(c["run_id"], c["status"]) for c in shown["children"]] == [(ids[1], "redacted")]
    assert f"{ids[1]}  redacted: its events are tombstones" in ok(db, "runs", "show", ids[0], "--tree")
    refused = run_gormes(db, "runs", "show", ids[1])
    assert refused.returncode == 2 and "was redacted" in refused.stderr


def test_a_jobs_run_redacted_leaves_jobs_get_and_top_working(tmp_path: Path):
    db, script = tmp_path / "g.db", tmp_path / "s.json"
    script.write_text(json.dumps({"model": "scripted", "agents": [{"replies": [{"text": "the answer"}]}]}))
    job = ok(db, "jobs", "submit", "agent", "--data",
             json.dumps({"prompt": "p", "model": f"scripted:{script}"})).strip()
    with running_worker(db):
        assert ok(db, "jobs", "wait", job, "--timeout", "60").strip() == "completed"
    ok(db, "redact", "--stream", f"run-{run_ids(db)[0]}", "--reason", "erasure request")
    got = json.loads(ok(db, "jobs", "get", job, "--json"))
    assert got["status"] == "completed" and got["cost"] is None  # its turn's usage is gone
    top = json.loads(ok(db, "top", "--once", "--json"))
    assert top["by_status"]["completed"] == 1
