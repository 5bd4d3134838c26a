"""`gormes doctor` through the real CLI in subprocesses: JSON shape and exit codes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from cli_helpers import run_gormes, write_notes

# Parts that may be honestly degraded in this environment: semantic recall is off
# unless the gormes[semantic] extra is installed, and the doctor says so.
DEGRADED_HERE = {"memory.semantic"}


def _doctor(db: Path, *args: str) -> tuple[int, dict]:
    done = run_gormes(db, "doctor", "--json", *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def _fresh(tmp_path: Path) -> Path:
    db = tmp_path / "gormes.db"
    write_notes(db, [])
    return db


def test_a_fresh_database_offline_is_ok_apart_from_named_unchecked_parts(tmp_path):
    code, report = _doctor(_fresh(tmp_path), "--offline")
    assert code == 0
    assert report["schema_version"] == 1 and report["offline"] is True
    not_ok = {c["name"] for c in report["checks"] if c["status"] != "ok"}
    assert not_ok <= DEGRADED_HERE
    assert report["status"] == ("warnings" if not_ok else "ok")
    assert {s["name"] for s in report["skipped"]} == {
        "projections.lag", "queue.wedged", "workers.heartbeats", "workers.governor",
    }
    for c in report["checks"]:
        assert set(c) == {"name", "category", "status", "message", "remediation"}


def test_a_fresh_database_online_warns_that_no_worker_is_live(tmp_path):
    code, report = _doctor(_fresh(tmp_path))
    assert code == 0 and report["status"] == "warnings"
    heartbeats = next(c for c in report["checks"] if c["name"] == "workers.heartbeats")
    assert heartbeats["status"] == "warn" and "no live worker" in heartbeats["message"]
    assert report["skipped"] == []


def test_a_gap_in_the_log_is_an_error_with_exit_1(tmp_path):
    db = tmp_path / "gormes.db"
    write_notes(db, [("notes-1", "a"), ("notes-1", "b"), ("notes-1", "c")])
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM events WHERE position = 2")
    code, report = _doctor(db, "--offline")
    assert code == 1 and report["status"] == "error"
    positions = next(c for c in report["checks"] if c["name"] == "store.positions")
    assert positions["status"] == "fail" and positions["remediation"]


def test_human_output_has_one_line_per_check_and_the_same_exit_codes(tmp_path):
    db = _fresh(tmp_path)
    done = run_gormes(db, "doctor", "--offline")
    assert done.returncode == 0, done.stderr
    assert "store.positions" in done.stdout and "disk.free" in done.stdout
    assert "skip  queue.wedged" in done.stdout
    missing = run_gormes(tmp_path / "nope.db", "doctor")
    assert missing.returncode == 1
    assert "FAIL  store.schema" in missing.stdout and "no database at" in missing.stdout
