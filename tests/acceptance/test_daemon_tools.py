"""`gormes daemon` with a user's operations and an external MCP server named in its
settings file (`imports`, `mcp_config`): an agent job's run calls both, each call
recorded; the reference server `mcp-server-time` runs as long as the daemon."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import REPO, cli_env, gormes_command, run_gormes

VENV_BIN = Path(sys.executable).parent
WAIT = 60


def test_an_agent_job_calls_a_users_operation_and_an_mcp_tool_under_the_daemon(tmp_path: Path):
    if not (VENV_BIN / "mcp-server-time").exists():
        pytest.skip("mcp-server-time (a dev dependency) is not installed beside this Python")
    db = tmp_path / "gormes.db"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"agents": [{"replies": [
        {"tool_calls": [{"name": "units.convert", "arguments": {"value": 10, "to": "km"}},
                        {"name": "mcp.time.get_current_time", "arguments": {"timezone": "UTC"}}]},
        {"text": "done"},
    ]}]}))
    settings = tmp_path / "gormes.toml"
    settings.write_text(
        f'imports = ["{REPO / "examples" / "trip.py"}"]\n'
        f'mcp_config = "{REPO / "examples" / "mcp-servers.json"}"\n'
        "model_timeout_s = 30\n"
    )
    env = dict(cli_env(), PATH=os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")]))
    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen(gormes_command(db, "daemon", "--no-governor", "--config", str(settings)),
                              env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log)
    try:
        submitted = run_gormes(db, "jobs", "submit", "agent", "--json", "--data", json.dumps(
            {"prompt": "convert and tell the time", "model": f"scripted:{script}"}))
        assert submitted.returncode == 0, submitted.stderr
        job_id = json.loads(submitted.stdout)["id"]
        deadline = time.monotonic() + WAIT
        while True:
            found = json.loads(run_gormes(db, "jobs", "get", job_id, "--json").stdout)
            if found["status"] in ("completed", "failed", "dead") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert found["status"] == "completed", (found, (tmp_path / "daemon.log").read_text())
        events = run_gormes(db, "events", "--type", "run.tool_called", "--json")
        calls = [json.loads(line)["data"] for line in events.stdout.splitlines()]
        assert [(c["operation"], c["outcome"]) for c in calls] == [
            ("units.convert", "ok"), ("mcp.time.get_current_time", "ok")]
        assert calls[1]["result"]["structured"]["timezone"] == "UTC"
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=WAIT) == 0
        log.close()
