"""MCP tools in agent runs on the scripted model: offered by trust, called through
the executor, recorded in `run.tool_called` (and `run.started` records the
external tools offered), then replayed exactly with no server: in-process with the
servers stopped, and by `gormes replay` in a subprocess whose PATH has no MCP
server and whose configuration names none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mcp_source_helpers import BIN, GIT_SERVER, TIME_SERVER

from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import Replayer, replay
from gormes.events.audit import OperationAudited
from gormes.events.runs import RunStarted, RunToolCalled, run_stream
from gormes.ops.executor import Executor
from gormes.tools.builtin import default_registry
from gormes.tools.mcp import open_mcp_sources

GRANTED = ["operator", "system"]  # an operator's run is offered them: not operator-only


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


async def run_events(store, run_id: str) -> list:
    return [r.event for r in await store.read_stream(run_stream(run_id))]


async def test_an_agent_calls_mcp_tools_and_replays_exactly_with_no_server(
    store, db_path: Path, mcp_config, git_repo: Path, script, tmp_path: Path, monkeypatch,
) -> None:
    config = mcp_config(
        time={"command": TIME_SERVER, "trust": GRANTED},
        git={"command": GIT_SERVER, "trust": GRANTED, "tools": ["git_status", "git_log"]},
    )
    model = script({"replies": [
        {"tool_calls": [call("mcp.time.get_current_time", timezone="Etc/UTC"),
                        call("mcp.git.git_status", repo_path=str(git_repo))]},
        {"tool_calls": [call("mcp.time.get_current_time", timezone="No/Where")]},
        {"text": "it is now, and untracked.txt is new"},
    ]})
    registry = default_registry()
    async with open_mcp_sources(config, registry, store=store) as sources:
        assert sources.warnings == []
        executor = Executor(registry, store, workspace=tmp_path)
        async with RunManager.open(store, executor=executor) as runs:
            outcome = await runs.run("agent", {"prompt": "what time is it, and what changed?"}, model=model)
    assert outcome.status == "completed", outcome.error

    events = await run_events(store, outcome.run_id)
    started = events[0]
    assert isinstance(started, RunStarted)
    assert [t.name for t in started.external_tools] == [
        "mcp.git.git_log", "mcp.git.git_status", "mcp.time.convert_time", "mcp.time.get_current_time",
    ]
    status_tool = next(t for t in started.external_tools if t.name == "mcp.git.git_status")
    assert status_tool.source == "mcp:git" and status_tool.parameters == registry.input_schema("mcp.git.git_status")
    assert status_tool.trust == ("operator", "system")
    called = [e for e in events if isinstance(e, RunToolCalled)]
    assert [(c.operation, c.outcome) for c in called] == [
        ("mcp.time.get_current_time", "ok"), ("mcp.git.git_status", "ok"), ("mcp.time.get_current_time", "error"),
    ]
    assert called[0].result["structured"]["timezone"] == "Etc/UTC"
    assert "untracked.txt" in called[1].result["content"][0]["text"]
    assert called[2].error.startswith("mcp server 'time': get_current_time returned an error:")

    # in-process: the servers are stopped and the registry has no MCP tool at all
    head = await store.head()
    with DatabaseRuns(db_path) as source:
        report = await replay(source, outcome.run_id, registry=default_registry())
    assert report.exact, report.divergence
    assert await store.head() == head

    # without the recorded tools the model requests would not match: the rebuild is what makes it exact
    monkeypatch.setattr(Replayer, "registry_for", lambda self, started: self.registry)
    with DatabaseRuns(db_path) as source:
        blind = await replay(source, outcome.run_id, registry=default_registry())
    assert not blind.exact and blind.divergence is not None
    monkeypatch.undo()

    # the CLI, in another process, with no MCP server on PATH
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != BIN)
    env = {**os.environ, "PATH": path}
    proc = subprocess.run(
        [sys.executable, "-m", "gormes", "--db", str(db_path), "replay", outcome.run_id, "--json"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["exact"] is True


async def test_a_gateway_run_is_not_offered_an_operator_only_tool_and_its_call_is_denied_and_audited(
    store, mcp_config, script, tmp_path: Path,
) -> None:
    config = mcp_config(time={"command": TIME_SERVER})  # trust: operator only (the default)
    model = script({"replies": [
        {"tool_calls": [call("mcp.time.get_current_time", timezone="UTC")]},
        {"text": "denied, as it should be"},
    ]})
    registry = default_registry()
    async with open_mcp_sources(config, registry, store=store):
        executor = Executor(registry, store, workspace=tmp_path)
        assert "mcp.time.get_current_time" not in [t.name for t in registry.tool_schemas("gateway")]
        assert "mcp.time.get_current_time" not in [t.name for t in registry.tool_schemas("operator")]
        async with RunManager.open(store, executor=executor) as runs:
            outcome = await runs.run("agent", {"prompt": "time?"}, model=model, trust="gateway")
    assert outcome.status == "completed", outcome.error
    events = await run_events(store, outcome.run_id)
    assert events[0].external_tools == ()
    (called,) = [e for e in events if isinstance(e, RunToolCalled)]
    assert (called.operation, called.outcome) == ("mcp.time.get_current_time", "denied")
    audited = [r.event for r in await store.read_all()
               if isinstance(r.event, OperationAudited) and r.event.operation == "mcp.time.get_current_time"]
    assert [(a.trust, a.allowed, a.outcome) for a in audited] == [("gateway", False, "denied")]


async def test_a_run_whose_server_is_not_there_gets_a_clear_tool_error(
    store, mcp_config, script, tmp_path: Path,
) -> None:
    async with open_mcp_sources(mcp_config(time={"command": TIME_SERVER, "trust": GRANTED}), default_registry(),
                                store=store):
        pass  # the catalog is recorded
    model = script({"replies": [
        {"tool_calls": [call("mcp.time.get_current_time", timezone="UTC")]},
        {"text": "the time server is down"},
    ]})
    registry = default_registry()
    gone = mcp_config(time={"command": str(tmp_path / "no-such-server"), "trust": GRANTED})
    async with open_mcp_sources(gone, registry, store=store) as sources:
        assert len(sources.warnings) == 1 and "failed to start" in sources.warnings[0]
        async with RunManager.open(store, executor=Executor(registry, store, workspace=tmp_path)) as runs:
            outcome = await runs.run("agent", {"prompt": "time?"}, model=model)
    assert outcome.status == "completed", outcome.error
    (called,) = [e for e in await run_events(store, outcome.run_id) if isinstance(e, RunToolCalled)]
    assert called.outcome == "error"
    assert called.error.startswith("mcp server 'time' failed to start (command ")
    assert "No such file" in called.error
