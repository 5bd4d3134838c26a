"""`gormes jobs list` and `jobs get` read a current ledger straight from the SQLite
file, with no event loop (no trio import), and give the same answer; a ledger that
is behind the log (events appended by something other than gormes' store) sends
them the usual way, which catches it up first."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from cli_helpers import cli_env, run_gormes

from gormes.events.jobs import JobOptions, JobSubmitted, job_stream
from gormes.events.sqlite_log import SQLiteLog


def imports_trio(db: Path, *args: str) -> bool:
    """Whether `gormes --db DB ARGS` imported trio (`python -X importtime`)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "gormes", "--db", str(db), *args],
                          capture_output=True, text=True, env=cli_env(), timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return re.search(r"^import time:.*\|\s+trio$", done.stderr, re.MULTILINE) is not None


def test_a_current_ledger_is_read_without_trio_and_a_behind_one_is_caught_up(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    submitted = run_gormes(db, "jobs", "submit", "echo", "--data", '{"a": 1}', "--json")
    job_id = json.loads(submitted.stdout)["id"]

    # current: the quick read, the same rows
    assert not imports_trio(db, "jobs", "list", "--json")
    assert not imports_trio(db, "jobs", "get", job_id, "--json")
    listed = json.loads(run_gormes(db, "jobs", "list", "--json").stdout)
    assert [j["id"] for j in listed] == [job_id] and listed[0]["data"] == {"a": 1}
    assert json.loads(run_gormes(db, "jobs", "get", job_id, "--json").stdout)["status"] == "waiting"

    # behind: a job.submitted appended past the store (its ledger hook is not on this log)
    log = SQLiteLog(db)
    try:
        log.append_now(job_stream("OUTSIDE"), [JobSubmitted(
            job_id="OUTSIDE", name="echo", data=None, options=JobOptions(),
            created_at=int(time.time() * 1000))])
    finally:
        log.close()
    assert imports_trio(db, "jobs", "get", "OUTSIDE", "--json")  # the usual way
    got = json.loads(run_gormes(db, "jobs", "get", "OUTSIDE", "--json").stdout)
    assert (got["id"], got["status"]) == ("OUTSIDE", "waiting")
    assert not imports_trio(db, "jobs", "list", "--json")  # caught up: quick again
    assert {j["id"] for j in json.loads(run_gormes(db, "jobs", "list", "--json").stdout)} == {job_id, "OUTSIDE"}


def test_runs_list_reads_a_current_runs_projection_without_trio(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    script = tmp_path / "model.json"
    script.write_text(json.dumps({"agents": [{"replies": [{"text": "done"}]}]}))
    ran = run_gormes(db, "run", "agent", "--prompt", "hi", "--model", f"scripted:{script}", "--json")
    run_id = json.loads(ran.stdout)["run_id"]
    assert imports_trio(db, "runs", "list", "--json")  # the projection was not built: the usual way
    assert not imports_trio(db, "runs", "list", "--json")  # now it is current: read straight
    rows = json.loads(run_gormes(db, "runs", "list", "--json", "--status", "completed").stdout)
    assert [(r["run_id"], r["process"]) for r in rows] == [(run_id, None)]
    run_gormes(db, "run", "agent", "--prompt", "again", "--model", f"scripted:{script}")
    assert imports_trio(db, "runs", "list", "--json")  # behind the log again: caught up first
    assert len(json.loads(run_gormes(db, "runs", "list", "--json").stdout)) == 2
