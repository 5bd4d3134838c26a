"""The built-in job handler "agent": a run as a durable job.

The job gives the run its leases, retries, pause and resume; the run records every
observation on its own stream (`run.started` names the job). Tokens the run and
its subagents use are also added to the job (ctx.tokens), so they roll up to the
job's parent when the job completes. Messages sent to the job reach the agent's
inbox. The job's result is the run's result; a failed run fails the attempt.

Job data: the agent's input plus where it runs:

    {"prompt": "...", "system": "...", "model": "scripted:demo.json",
     "tools": ["fs.read"], "max_iterations": 8, "deadline_s": 60,
     "handler": "agent"}          # any registered run handler; "input" then is its input

The fs tools work in GORMES_WORKSPACE (the worker's environment); without it they
are unavailable.

Not built: resuming the same run on a later attempt (replaying its recorded
prefix). Each attempt is a run of its own; an attempt that is paused, loses its
lease or is shut down ends its run as `run.cancelled` with the job's abort reason.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from gormes.actors.handlers import UnrecoverableError, job
from gormes.actors.job_context import JobContext
from gormes.events.jobs import Tokens

WORKSPACE_ENV = "GORMES_WORKSPACE"
RUN_OPTIONS = ("model", "tools", "max_iterations", "deadline_s")


class AgentJobData(msgspec.Struct, frozen=True, kw_only=True):
    handler: str = "agent"
    input: Any = None
    model: str | None = None
    tools: list[str] | None = None
    max_iterations: int | None = None
    deadline_s: float | None = None


def parse_job_data(data: Any) -> tuple[AgentJobData, Any]:
    """(run options, the handler's input). For "agent" without "input", the data
    itself (minus the run options) is the agent's input."""
    if not isinstance(data, dict):
        raise UnrecoverableError(f"agent job data must be a JSON object, got {type(data).__name__}")
    try:
        options = msgspec.convert(
            {k: v for k, v in data.items() if k in ("handler", "input", *RUN_OPTIONS)}, AgentJobData
        )
    except msgspec.ValidationError as exc:
        raise UnrecoverableError(f"agent job data: {exc}") from None
    if "input" in data:
        return options, options.input
    return options, {k: v for k, v in data.items() if k not in ("handler", "deadline_s")}


def _executor(store: Any) -> Any:
    from gormes.ops.builtin import default_registry
    from gormes.ops.executor import Executor

    return Executor(default_registry(), store, workspace=os.environ.get(WORKSPACE_ENV) or None)


@job("agent")
async def agent_job(ctx: JobContext, data: Any) -> Any:
    from gormes.actors.runs import RunManager
    from gormes.errors import UserError

    options, run_input = parse_job_data(data)
    store = ctx._queue.store

    async def to_job(tokens: Tokens) -> None:
        await ctx.tokens(input=tokens.input, output=tokens.output, cache_read=tokens.cache_read)

    async with RunManager.open(store, executor=_executor(store)) as runs:
        try:
            handle = await runs.start(
                options.handler, run_input, model=options.model, tools=options.tools,
                max_iterations=options.max_iterations, deadline_s=options.deadline_s,
                trust="system", job_id=ctx.id, token_sink=to_job, job=ctx,
                outside_reason=lambda: f"job {ctx.abort_reason}" if ctx.abort_reason else None,
            )
        except UserError as exc:  # unknown handler, bad model spec: retrying will not help
            raise UnrecoverableError(str(exc)) from None
        outcome = await handle.outcome()
    if outcome.status == "completed":
        return {"run_id": outcome.run_id, "result": outcome.result}
    raise RuntimeError(f"run {outcome.run_id} {outcome.status}: {outcome.error}")
