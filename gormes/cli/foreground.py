"""What the commands that drive runs in the foreground share (`gormes run`,
`gormes fork`, `gormes runs resume`): their common options, a RunManager on the
store with the built-in operations, the operator's door that starts their runs on
it (run.start, run.fork, run.resume: audited, gormes/tools/run_admin.py), SIGINT and
SIGTERM, and the outcome's lines.

SIGINT or SIGTERM cancels the runs, which record `run.cancelled` ("interrupted by
SIGINT"), instead of the process dying with its runs left with no end (which
would read as `running` for ever); the command then exits 128 + the signal's
number.

    outcome, signals = drive_runs(obj.target, workspace, lambda door: start_and_wait(door, "run.start", {...}))
    sys.exit(exit_code(outcome, signals))
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import msgspec

from gormes.cli.imports import import_option as import_option
from gormes.cli.imports import mcp_config_option as mcp_config_option

if TYPE_CHECKING:
    from gormes.cli.ops import OperatorDoor

SIGNALS = (signal.SIGINT, signal.SIGTERM)

workspace_option = click.option(
    "--workspace", type=click.Path(file_okay=False, exists=True), envvar="GORMES_WORKSPACE",
    help="Root of the fs tools (env GORMES_WORKSPACE); without it they are unavailable.")
model_timeout_option = click.option(
    "--model-timeout", "model_timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
    help="How long one model request may take (default: env GORMES_MODEL_TIMEOUT, else 120).")
model_retries_option = click.option(
    "--model-retries", "model_retries", type=click.IntRange(min=0), metavar="N",
    help="Retries of a model request that failed retryably, each recorded (default: env "
    "GORMES_MODEL_RETRIES, else 3).")


def drive_runs(target: Any, workspace: str | None, fn: Callable[[OperatorDoor], Awaitable[Any]], *,
               mcp_config: str | None = None, model_timeout: float | None = None,
               model_retries: int | None = None) -> tuple[Any, list[int]]:
    """Run `fn(door)` in trio within `foreground_runs`: (its result, the signals received)."""
    import trio

    signals: list[int] = []

    async def main() -> Any:
        async with foreground_runs(target, workspace, mcp_config=mcp_config, model_timeout=model_timeout,
                                   model_retries=model_retries) as (door, received):
            result = await fn(door)
            signals.extend(received)
            return result

    return trio.run(main), signals


@asynccontextmanager
async def foreground_runs(
    target: Any, workspace: str | None, *, mcp_config: str | None = None, model_timeout: float | None = None,
    model_retries: int | None = None,
) -> AsyncIterator[tuple[OperatorDoor, list[int]]]:
    """(the operator's door, the signals received so far): its run operations start
    runs on a RunManager on the store at `target`; the runs use the built-in
    operations (fs tools rooted at `workspace`), those `--import` declared and the
    tools of the MCP servers `mcp_config` names (started for the block), with the
    job queue of the store (a job a run submits waits there for a worker); each
    SIGINT or SIGTERM while the block runs cancels them all. `model_timeout`: each
    model request's timeout in seconds (None: GORMES_MODEL_TIMEOUT, else 120);
    `model_retries`: retries of a retryable failure (None: GORMES_MODEL_RETRIES, else 3)."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import trio

    from gormes.actors.jobs.queue import JobQueue
    from gormes.actors.runs.manager import RunManager
    from gormes.cli.imports import warn
    from gormes.cli.ops import operator_door
    from gormes.events.open import open_store
    from gormes.ops.executor import Executor
    from gormes.providers import open_provider
    from gormes.tools.run_admin import RunStarter
    from gormes.tools.sources import operation_registry, read_mcp_config

    def providers(spec: str) -> Any:
        return open_provider(spec, timeout=model_timeout)

    servers = read_mcp_config(mcp_config)  # a bad file is refused before the database is opened
    async with open_store(target) as store, operation_registry(store, servers, warn=warn) as registry:
        queue = await JobQueue.open(store)
        executor = Executor(registry, store, workspace=Path(workspace) if workspace else None, jobs=queue)
        async with RunManager.open(store, executor=executor, providers=providers, llm_retries=model_retries) as runs:
            async with cancel_runs_on_signals(runs) as received, trio.open_nursery() as nursery:
                yield operator_door(store, runs=RunStarter(runs, nursery)), received


async def start_and_wait(door: OperatorDoor, operation: str, value: Any,
                         on_start: Callable[[str], None] | None = None) -> Any:
    """Start a run through `door` with `operation` (run.start, run.fork or
    run.resume: audited), call `on_start(run_id)`, and wait for what it ends with
    (see `RunStarter.result`)."""
    started = await door.call(operation, value)
    if on_start is not None:
        on_start(started.run_id)
    assert door.executor.runs is not None
    return await door.executor.runs.result(started.run_id)


@asynccontextmanager
async def cancel_runs_on_signals(runs: Any) -> AsyncIterator[list[int]]:
    """While the block runs, each SIGINT or SIGTERM cancels every run of `runs` (a
    RunManager); the list it yields collects the signals received."""
    import trio

    received: list[int] = []
    with trio.open_signal_receiver(*SIGNALS) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for signum in signals:
                    received.append(signum)
                    runs.cancel_all(f"interrupted by {signal.Signals(signum).name}")

            nursery.start_soon(watch)
            yield received
            nursery.cancel_scope.cancel()


def exit_code(outcome: Any, received: list[int]) -> int:
    """128 + the first signal's number (the shell's convention for a command a
    signal ended), else 0 for a completed run and 1 otherwise."""
    if received:
        return 128 + received[0]
    return 0 if outcome.status == "completed" else 1


def echo_outcome(headline: str, outcome: Any) -> None:
    """`<headline> <status>  tokens in N out M`, then the result (or the error, on stderr)."""
    t = outcome.tokens
    click.echo(f"{headline} {outcome.status}  tokens in {t.input} out {t.output}")
    if outcome.status == "completed":
        result = outcome.result
        click.echo(result if isinstance(result, str) else msgspec.json.encode(result).decode())
    else:
        click.echo(f"error: {outcome.error}", err=True)
