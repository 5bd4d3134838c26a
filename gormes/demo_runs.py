"""The agent step of the demo: a coordinator spawns two subagents that use real tools.

The model is the scripted provider (`gormes/data/demo_script.json`): a fixed,
offline script of replies, not a language model. The tools are real: the
subagents list, read and grep this project's own docs through the audited
operation executor. Mid-run, an operator message steers the scout; it is
injected before the scout's next model turn. The run tree is printed with
tokens, then the whole run is replayed from the log, children included.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import trio
from rich.console import Console

from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.actors.runs.timeline import format_view, run_view
from gormes.events.runs import RunChildSpawned, RunToolCalled, run_stream
from gormes.events.store import EventStore
from gormes.ops.executor import Executor
from gormes.tools.builtin import builtin_registry

PROMPT = "Role: coordinator. Summarize how gormes records and explains its design."
STEER = "Operator: also note how the version cache stays correct (data_version)."


def demo_model() -> str:
    return f"scripted:{files('gormes') / 'data' / 'demo_script.json'}"


def demo_workspace() -> Path:
    """The project's own checkout when run from it (its docs/), else the installed package."""
    here = Path.cwd()
    if (here / "docs" / "decisions").is_dir() and (here / "README.md").exists():
        return here
    return Path(str(files("gormes"))).parent


async def _steer_scout_mid_run(store: EventStore, runs, parent_id: str) -> str:
    """Wait until the scout has made its first tool call, then message it."""
    scout_id = None
    async for record in store.subscribe(after=0, types=["run.child_spawned", "run.tool_called"]):
        event = record.event
        if isinstance(event, RunChildSpawned) and record.stream == run_stream(parent_id):
            if "Role: scout" in str(event.input):
                scout_id = event.child_run_id
        elif isinstance(event, RunToolCalled) and scout_id and record.stream == run_stream(scout_id):
            await runs.send(scout_id, STEER, sender="operator")
            return scout_id
    raise AssertionError("unreachable: a subscription never ends")


async def run_agent_demo(store: EventStore, console: Console) -> str:
    workspace = demo_workspace()
    executor = Executor(builtin_registry(), store, workspace=workspace)
    async with RunManager.open(store, executor=executor) as runs:
        handle = await runs.start("agent", {"prompt": PROMPT}, model=demo_model())
        with trio.fail_after(30):
            scout_id = await _steer_scout_mid_run(store, runs, handle.run_id)
            outcome = await handle.outcome()
    console.print(f"  run {handle.run_id}: [bold]{outcome.status}[/]; steered subagent {scout_id}")
    view = await run_view(store, handle.run_id, tree=True)
    for line in format_view(view, indent="  "):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    return handle.run_id


async def replay_agent_demo(db: Path, run_id: str, console: Console) -> None:
    """Rerun the recorded run, children included, with no side effects."""
    with DatabaseRuns(db) as source:
        report = await replay(source, run_id, registry=builtin_registry())
    runs = sum(1 for _ in report.walk())
    if report.tree_exact:
        console.print(f"  exact: {report.total_events} events reproduced across {runs} runs (no model call, no tool call, nothing written)")
    else:
        console.print(f"  [red]divergence[/]: {report.first_divergence}")
        raise SystemExit(1)
