"""Issue 16 end to end, through the real CLI: a user's tool file (an operation and a
run handler: examples/trip.py), `gormes run --import`, a tool of the reference MCP
server `mcp-server-time` (nobody here wrote it) named by examples/mcp-servers.json,
the run recorded; `gormes replay` exact with the server gone from PATH; a
deliberate change to the arguments the user's code passes its tool is a
divergence that names the argument and both values."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from cli_helpers import REPO, cli_env, gormes_command

import subprocess

EXAMPLES = REPO / "examples"
TRIP = EXAMPLES / "trip.py"
SCRIPT = EXAMPLES / "trip_script.json"
SERVERS = EXAMPLES / "mcp-servers.json"
VENV_BIN = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(
    shutil.which("mcp-server-time", path=str(VENV_BIN)) is None,
    reason="mcp-server-time (a dev dependency) is not installed beside this Python",
)


def gormes(db: Path, *args: str, path: str) -> subprocess.CompletedProcess[str]:
    env = dict(cli_env(), PATH=path)
    # No model API is reachable: a request to one would fail, not pass silently.
    env["OPENAI_BASE_URL"] = env["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:9"
    return subprocess.run(gormes_command(db, *args), capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120)


def without_servers() -> str:
    """PATH with no MCP server on it (the venv's bin holds the reference servers)."""
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and Path(p).resolve() != VENV_BIN.resolve())
    assert shutil.which("mcp-server-time", path=path) is None
    return path


def with_servers() -> str:
    return os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")])


@pytest.fixture
def recorded_trip(tmp_path: Path) -> tuple[Path, dict]:
    db = tmp_path / "gormes.db"
    ran = gormes(db, "run", "trip", "--import", str(TRIP), "--mcp-config", str(SERVERS),
                 "--model", f"scripted:{SCRIPT}", "--input", '{"km": 120, "city": "Lyon"}', "--json",
                 path=with_servers())
    assert ran.returncode == 0, ran.stderr
    outcome = json.loads(ran.stdout)
    assert outcome["status"] == "completed", outcome
    return db, outcome


def tool_calls(db: Path, run_id: str) -> list[dict]:
    shown = gormes(db, "events", "--stream", f"run-{run_id}", "--json", path=without_servers())
    assert shown.returncode == 0, shown.stderr
    events = [json.loads(line) for line in shown.stdout.splitlines()]
    return [e["data"] for e in events if e["type"] == "run.tool_called"]


def test_a_users_tool_and_an_mcp_tool_are_recorded_and_replay_with_the_server_gone(recorded_trip):
    db, outcome = recorded_trip
    calls = tool_calls(db, outcome["run_id"])
    assert [(c["operation"], c["outcome"]) for c in calls] == [
        ("units.convert", "ok"), ("mcp.time.get_current_time", "ok")]
    assert calls[0]["result"] == {"value": 74.6, "unit": "mi"}
    # what the real server answered, recorded before the handler saw it
    assert calls[1]["result"]["structured"]["timezone"] == "Europe/Paris"

    replayed = gormes(db, "replay", outcome["run_id"], "--import", str(TRIP), "--json", path=without_servers())
    assert replayed.returncode == 0, replayed.stderr
    report = json.loads(replayed.stdout)
    assert report["exact"] is True, report
    assert report["divergence"] is None
    assert [c["exact"] for c in report["children"]] == [True]  # the scout subagent too


def test_a_changed_argument_in_the_users_code_is_named_with_both_values(recorded_trip, tmp_path):
    db, outcome = recorded_trip
    changed = tmp_path / "trip.py"
    source = TRIP.read_text()
    assert source.count('"to": "mi"') == 1
    changed.write_text(source.replace('"to": "mi"', '"to": "km"'))

    replayed = gormes(db, "replay", outcome["run_id"], "--import", str(changed), "--json", path=without_servers())
    assert replayed.returncode == 1, replayed.stderr
    divergence = json.loads(replayed.stdout)["divergence"]
    differences = divergence["diff"]["differences"]
    assert [(d["what"], d["path"]) for d in differences] == [("argument", "arguments.to")]
    assert (differences[0]["recorded"], differences[0]["asked"]) == ('"mi"', '"km"')

    text = gormes(db, "replay", outcome["run_id"], "--import", str(changed), path=without_servers())
    assert text.returncode == 1
    assert "divergence at position" in text.stdout
    assert 'argument to: recorded "mi", code asked "km"' in text.stdout


def test_an_mcp_server_that_is_not_there_is_a_warning_and_a_tool_error_never_a_hang(tmp_path):
    db = tmp_path / "gormes.db"
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"time": {
        "command": "no-such-mcp-server", "trust": ["operator", "child-agent"], "startup_timeout": 5}}}))
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"agents": [{"replies": [
        {"tool_calls": [{"name": "mcp.time.get_current_time", "arguments": {"timezone": "UTC"}}]},
        {"text": "no clock today"},
    ]}]}))
    ran = gormes(db, "run", "agent", "--prompt", "what time is it", "--model", f"scripted:{script}",
                 "--mcp-config", str(config), "--json", path=with_servers())
    assert ran.returncode == 0, ran.stderr
    assert "gormes: warning: " in ran.stderr and "no-such-mcp-server" in ran.stderr
    outcome = json.loads(ran.stdout)
    # with no catalog recorded yet the server has no tools: the model's call is refused, recorded
    (call,) = tool_calls(db, outcome["run_id"])
    assert (call["operation"], call["outcome"]) == ("mcp.time.get_current_time", "denied")
