"""The governor's thresholds from `gormes worker` options, and why its limit is
what it is, as `gormes top --once --json` and `gormes doctor` show it (issue 19, item 9)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest
from cli_helpers import create_database, assert_one_line_error, cli_env, gormes_command, run_gormes


def governor_info(db: Path) -> dict | None:
    if not db.exists():
        return None
    conn = sqlite3.connect(db)
    try:
        row = conn.execute("SELECT info FROM worker_heartbeats").fetchone()
    except sqlite3.OperationalError:  # no heartbeat table yet
        return None
    finally:
        conn.close()
    return json.loads(row[0])["governor"] if row else None


def test_a_worker_governed_by_its_options_says_why_in_top_and_doctor(tmp_path: Path):
    db = tmp_path / "gov.db"
    create_database(db)
    # Memory above 1% is always "high": the governor halves the limit, for a reason it names.
    # The CPU is never above 100% (its test is `>`): a machine busy with other work does
    # not make the reason the CPU's.
    worker = subprocess.Popen(
        gormes_command(db, "worker", "--concurrency", "4", "--governor-cpu", "machine", "--cpu-high", "100",
                       "--cpu-low", "99", "--memory-low", "0", "--memory-high", "1", "--memory-breaker", "100"),
        env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        for _ in range(300):  # a beat after the first decision (beats every 5 s)
            info = governor_info(db)
            if info and info["recent"]:
                break
            run_gormes(db, "jobs", "stats")  # a pause that is a real process, not a sleep
        assert info and info["recent"], info
        assert info["cpu"] == "machine" and info["ceiling"] == 4
        assert info["thresholds"] == {"cpu_high": 100.0, "cpu_low": 99.0, "memory_high": 1.0,
                                      "memory_low": 0.0, "memory_breaker": 100.0}
        assert "above 1%: halved 4 -> 2" in info["recent"][0]["reason"]

        top = run_gormes(db, "top", "--once", "--json")
        assert top.returncode == 0, top.stderr
        [row] = json.loads(top.stdout)["workers"]
        assert row["governor"]["cpu"] == "machine" and "above 1%" in row["governor"]["reason"]
        assert row["governor"]["recent"][0]["previous"] == 4
        screen = run_gormes(db, "top", "--once")
        assert "governor: recent decisions and why" in screen.stdout
        assert "4 -> 2" in screen.stdout and "above 1%: halved 4 -> 2" in screen.stdout

        doctor = run_gormes(db, "doctor", "--json")
        [check] = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "workers.governor"]
        assert check["status"] == "warn"
        assert "at 1 of 4" in check["message"] or "at 2 of 4" in check["message"]  # halved once or twice by now
        assert "memory" in check["message"] and "above 1%" in check["message"]
        assert "--governor-cpu process" in check["remediation"]
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)


@pytest.mark.parametrize("args, says", [
    (("--cpu-low", "95"), "governor options: governor wants 0 <= cpu_low <= cpu_high"),
    (("--memory-breaker", "50"), "memory_high <= memory_breaker"),
    (("--cpu-high", "150"), "--cpu-high"),
    (("--governor-cpu", "host"), "--governor-cpu"),
])
def test_governor_options_that_cannot_work_are_one_line(tmp_path: Path, args, says):
    db = tmp_path / "gov.db"
    line = assert_one_line_error(run_gormes(db, "worker", *args))
    assert says in line
    assert not db.exists()
