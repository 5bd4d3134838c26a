"""The daemon's settings file (and the approval environment) with values that
pass every check and then break the daemon once it runs.

Found: `status_interval_s = nan` (TOML has nan and inf) passed `<= 0`, so the
daemon started, sent READY, and died with a trio traceback at its first STATUS
tick; given to a running daemon on SIGHUP it was "reloaded" and then killed the
daemon, losing the running configuration the reload rule promises to keep.
`[governor_policy] interval_s = nan` did the same. `lease_ms` past what a
timestamp can hold (`now + lease` overflows the ledger's 64-bit integer) made
the daemon spin a core and ignore SIGTERM. `approval_timeout_s = inf` (or
GORMES_APPROVAL_TIMEOUT=inf) passed `> 0`, and then every call needing approval
failed its run with `OverflowError` after the run was recorded.

Each is now one clear error when the file is read (on start: one `gormes:
error:` line, exit 2; on reload: the load fails, so the daemon keeps running as
before, gormes/daemon.py `_reload`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, run_gormes

from gormes.actors.runs.approvals import ApprovalPolicy, InvalidApprovalPolicy
from gormes.daemon import InvalidSettings, load_settings

BAD = [
    ("status_interval_s = nan", "status_interval_s"),
    ("status_interval_s = inf", "status_interval_s"),
    ("lease_ms = 9223372036854775807", "lease_ms"),
    ("approval_timeout_s = inf", "approval"),
    ("model_timeout_s = inf", "model_timeout_s"),
    ("retain_every_s = inf", "retain_every_s"),
    ("retain_older_than_days = inf", "retain_older_than_days"),
    ("[governor_policy]\ninterval_s = nan", "interval_s"),
    ("[governor_policy]\ninterval_s = inf", "interval_s"),
]


@pytest.mark.parametrize("text, names", BAD)
def test_a_value_the_daemon_cannot_run_with_is_refused_when_the_file_is_read(tmp_path: Path, text: str, names: str):
    """`load_settings` is what start-up and SIGHUP both call: refused here, a
    reload fails and the daemon keeps its running configuration."""
    path = tmp_path / "daemon.toml"
    path.write_text(text + "\n")
    with pytest.raises(InvalidSettings, match=names):
        load_settings(path, {})


def test_a_nan_status_interval_is_one_line_on_start_not_a_crash_after_ready(tmp_path: Path):
    path = tmp_path / "daemon.toml"
    path.write_text("cron = false\nstatus_interval_s = nan\n")
    done = run_gormes(tmp_path / "g.db", "daemon", "--config", str(path))
    line = assert_one_line_error(done)
    assert done.returncode == 2, done.stderr
    assert "status_interval_s" in line


@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), 1e300])
def test_an_approval_timeout_no_clock_can_hold_is_refused(timeout: float):
    with pytest.raises(InvalidApprovalPolicy):
        ApprovalPolicy(require=("fs.read",), timeout_s=timeout)


def test_an_infinite_approval_timeout_in_the_environment_is_one_line_and_starts_no_run(tmp_path: Path, monkeypatch):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"agents": [{"replies": [
        {"tool_calls": [{"name": "fs.read", "arguments": {"path": "notes.txt"}}]}, {"text": "read it"},
    ]}]}))
    monkeypatch.setenv("GORMES_APPROVAL_TIMEOUT", "inf")
    db = tmp_path / "g.db"
    done = run_gormes(db, "run", "agent", "--prompt", "x", "--model", f"scripted:{script}",
                      "--workspace", str(ws), "--require-approval", "fs.read")
    line = assert_one_line_error(done)
    assert done.returncode == 2, done.stderr
    assert "GORMES_APPROVAL_TIMEOUT" in line or "approval timeout" in line
    listed = run_gormes(db, "runs", "list", "--json")
    assert listed.returncode != 0 or "run_id" not in listed.stdout, listed.stdout


def test_a_lease_past_any_timestamp_is_one_line_for_the_worker(tmp_path: Path):
    done = run_gormes(tmp_path / "g.db", "worker", "--lease", "9223372036854775807")
    assert_one_line_error(done)
    assert done.returncode == 2, done.stderr
