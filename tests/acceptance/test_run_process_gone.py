"""A foreground run whose process is killed outright (SIGKILL) has no end: it
reads as cut off at once (`runs list`: process "gone", the doctor warns), and a
daemon on the same host records it as cancelled ("cut off: its process N on H is
gone"), leaving a live run alone."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_helpers import REPO, cli_env, gormes_command, run_gormes
from test_runs_resume import runs_by_id, start_run, write_script

pytestmark = pytest.mark.slow

WAIT = 60.0  # an upper bound for the daemon's sweep, never a measured duration


def doctor_check(db: Path, name: str) -> dict:
    result = run_gormes(db, "doctor", "--json")
    return next(c for c in json.loads(result.stdout)["checks"] if c["name"] == name)


def test_a_daemon_records_a_killed_foreground_run_as_cut_off(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    killed, killed_id = start_run(db, write_script(tmp_path / "killed.json", 60_000))
    live, live_id = start_run(db, write_script(tmp_path / "live.json", 60_000))
    daemon = None
    try:
        killed.send_signal(signal.SIGKILL)
        killed.communicate(timeout=30)
        rows = runs_by_id(db)
        assert (rows[killed_id]["status"], rows[killed_id]["process"]) == ("running", "gone")
        assert (rows[live_id]["status"], rows[live_id]["process"]) == ("running", "alive")
        check = doctor_check(db, "runs.cut_off")
        assert check["status"] == "warn" and f"{killed_id} (process {killed.pid} on " in check["message"]
        assert live_id not in check["message"] and "1 run(s) outside a job running here" in check["message"]

        daemon = subprocess.Popen(gormes_command(db, "daemon", "--no-governor"), env=cli_env(), cwd=REPO,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + WAIT
        while runs_by_id(db)[killed_id]["status"] == "running":
            assert time.monotonic() < deadline and daemon.poll() is None, "the daemon never ended the run"
            time.sleep(0.2)
        rows = runs_by_id(db)
        host = rows[killed_id]["host"]
        assert (rows[killed_id]["status"], rows[killed_id]["error"]) == (
            "cancelled", f"cut off: its process {killed.pid} on {host} is gone")
        assert rows[live_id]["status"] == "running"  # swept in the same pass, and left alone
        assert doctor_check(db, "runs.cut_off")["status"] == "ok"
        replayed = run_gormes(db, "replay", killed_id, "--json")
        assert replayed.returncode == 0 and json.loads(replayed.stdout)["exact"], replayed.stdout
    finally:
        outputs = {}
        for name, proc in (("live", live), ("daemon", daemon)):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            if proc is not None:
                outputs[name] = proc.communicate(timeout=30)[1]
    assert daemon.returncode == 0, outputs["daemon"]
    assert f"run {killed_id}: cut off, its process is gone; recorded as cancelled" in outputs["daemon"]
