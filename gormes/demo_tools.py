"""The demo's step with a user's own code: examples/trip.py, loaded as `--import`
loads it, declares an operation (`units.convert`) and a run handler (`trip`); the
run also calls a tool of the reference MCP server `mcp-server-time` (nobody here
wrote it) when it is installed, as `make demo` installs it. The run is recorded,
then replayed exactly with no server started.

The examples live in the source checkout (examples/), not in the wheel: from an
installed gormes the step says so and is skipped.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console

from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.actors.runs.timeline import format_view, run_view
from gormes.events.store import EventStore
from gormes.ops.executor import Executor
from gormes.tools.builtin import default_registry
from gormes.tools.imports import load_imports
from gormes.tools.sources import operation_registry

TRIP_INPUT = {"km": 120, "city": "Lyon"}
MCP_SERVER = "mcp-server-time"


def examples_dir() -> Path | None:
    """examples/ of the checkout the demo runs from, if there is one."""
    here = Path.cwd() / "examples"
    return here if (here / "trip.py").is_file() else None


async def run_tools_demo(store: EventStore, console: Console) -> str | None:
    """Run `trip` from examples/trip.py; its run id, or None when there is no examples/."""
    examples = examples_dir()
    if examples is None:
        console.print("  skipped: examples/ is in the source checkout (run the demo from there)")
        return None
    load_imports([str(examples / "trip.py")])
    mcp_config = examples / "mcp-servers.json"
    if shutil.which(MCP_SERVER) is None:
        console.print(f"  {MCP_SERVER} is not on PATH: the run goes without its MCP tool "
                      f"(pip install {MCP_SERVER}; make demo installs it)", soft_wrap=True)
        config: Path | None = None
    else:
        config = mcp_config
        console.print(f"  tools: units.convert from examples/trip.py (--import), and the tools of "
                      f"{MCP_SERVER} named by examples/mcp-servers.json (--mcp-config)", soft_wrap=True)

    def warn(line: str) -> None:
        console.print(f"  [yellow]warning[/]: {line}", soft_wrap=True, highlight=False, markup=False)

    async with operation_registry(store, config, warn=warn) as registry:
        executor = Executor(registry, store)
        async with RunManager.open(store, executor=executor) as runs:
            outcome = await runs.run("trip", TRIP_INPUT, model=f"scripted:{examples / 'trip_script.json'}")
    console.print(f"  run {outcome.run_id} (handler trip): [bold]{outcome.status}[/]")
    view = await run_view(store, outcome.run_id, tree=True)
    for line in format_view(view, indent="  "):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    return outcome.run_id


async def replay_tools_demo(db: Path | str, run_id: str, console: Console) -> None:
    """Replay the trip run: the user's operation and the MCP tool served from the log."""
    with DatabaseRuns(db) as source:
        report = await replay(source, run_id, registry=default_registry())
    if report.tree_exact:
        runs = sum(1 for _ in report.walk())
        console.print(f"  exact: {report.total_events} events reproduced across {runs} runs (your operation "
                      "and the MCP tool served from the log: no server started, nothing written)", soft_wrap=True)
    else:
        console.print(f"  [red]divergence[/]: {report.first_divergence}")
        raise SystemExit(1)
