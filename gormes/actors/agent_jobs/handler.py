"""The built-in job handler "agent": a run as a durable job.

The job gives the run its leases, retries, pause and resume; the run records every
observation on its own stream (`run.started` names the job). Tokens the run and
its subagents use are also added to the job (ctx.tokens), so they roll up to the
job's parent when the job completes. Messages sent to the job reach the agent's
inbox. The job's result is the run's result; a failed run fails the attempt.

Job data: the agent's input plus where it runs (gormes/tools/agent_job_data.py,
which also checks it at submission):

    {"prompt": "...", "system": "...", "model": "scripted:demo.json",
     "tools": ["fs.read"], "max_iterations": 8, "deadline_s": 60,
     "handler": "agent"}          # any registered run handler; "input" then is its input

The fs tools work in GORMES_WORKSPACE (the worker's environment); without it they
are unavailable.

The run acts for whoever submitted the job (decision 0016): its tool calls are made
with the job's submitter's trust class and memory scope (`run_identity`), never
with the worker's; a job with no recorded submitter (older logs, Python callers
without one) runs as `child-agent`, pinned to the job's own chat scope. The
data cannot say otherwise: only the submitter recorded by the queue counts.

Each attempt is a run of its own, named in the job's log (a transcript entry with
`data={"agent_run": RUN_ID, ...}`) before it starts. Each attempt first gives the
job any tokens the earlier attempts' runs used that never reached it (a pause
between a turn and its count; see `tokens.py`). An attempt that is paused,
loses its lease or is shut down ends its run as `run.cancelled` with the job's
abort reason. The next attempt looks at the run the previous one named
(decision 0011):

- cut off with no end (the worker died): first recorded as `run.cancelled`, it
  and its subagents left with no end, saying so (`cut_off`), so that no dead run
  reads as running; then, as for
- cancelled: the new run RESUMES it (acting for the job's submitter, or for the
  earlier run's class if that is narrower), a new run with `resumed_from` whose
  handler is served the earlier run's recorded prefix (model turns, tool results,
  inbox reads, clock and random readings, finished children) from the record,
  then continues live; nothing in the prefix calls the provider, runs a tool or
  counts tokens again;
- completed (the attempt died before the job recorded its completion): the job
  completes with that run's result, and no run is started;
- failed, or none, or the code no longer replays its prefix: a fresh run.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import trio
from trio.lowlevel import RunVar

from gormes.actors.agent_jobs.attempts import AGENT_RUN, attempt_runs, last_attempt_run
from gormes.actors.agent_jobs.cut_off import cut_off_reason
from gormes.actors.agent_jobs.tokens import missed_tokens, total
from gormes.actors.jobs.context import JobContext
from gormes.actors.jobs.handlers import UnrecoverableError
from gormes.actors.jobs.state import LockLost
from gormes.actors.runs.agent import AgentInput
from gormes.actors.runs.continuation import resume_run
from gormes.actors.runs.cut_off import end_cut_off_runs
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import RecordedRun, split_run
from gormes.errors import UserError
from gormes.events.base import Recorded
from gormes.events.jobs import Submitter, Tokens, job_stream
from gormes.events.runs import RunCompleted, run_stream
from gormes.events.store import EventStore
from gormes.ops.executor import Executor
from gormes.ops.registry import Registry
from gormes.ops.declared import declared
from gormes.providers import Provider, open_provider
from gormes.tools.agent_job_data import AgentJobData, InvalidAgentJobData, check_job_data
from gormes.tools.builtin import default_registry
from gormes.tools.memory import NAMES_ITS_SCOPE, own_scope

WORKSPACE_ENV = "GORMES_WORKSPACE"
# The class a job with no recorded submitter acts with (decision 0016).
UNATTRIBUTED_TRUST = "child-agent"


class ActsFor(msgspec.Struct, frozen=True, kw_only=True):
    """Whom a job's runs act for: the trust class and memory scope of their tool calls."""

    trust: str
    scope: str | None  # None: the class names its scope (operator, system)


def run_identity(job_id: str, submitter: Submitter | None) -> ActsFor:
    """The job's submitter's trust class and memory scope; for a pinned class with no
    recorded scope, the submitter's own chat. With no submitter: UNATTRIBUTED_TRUST,
    pinned to the job's own chat (`chat:job-<id>`, the same for every attempt)."""
    if submitter is None:
        return ActsFor(trust=UNATTRIBUTED_TRUST, scope=own_scope(f"job-{job_id}"))
    if submitter.trust in NAMES_ITS_SCOPE:
        return ActsFor(trust=submitter.trust, scope=submitter.scope)
    return ActsFor(trust=submitter.trust, scope=submitter.scope or own_scope(submitter.caller))


def parse_job_data(data: Any) -> tuple[AgentJobData, Any]:
    """`check_job_data` inside the handler: invalid data is unrecoverable, so the
    job goes dead at once instead of being retried as if the failure were transient."""
    try:
        return check_job_data(data)
    except InvalidAgentJobData as exc:
        raise UnrecoverableError(str(exc)) from None


_shared_default: tuple[tuple[int, ...], list[Any], Registry] | None = None


def _default_operations() -> Registry:
    """`default_registry()`, built again only when the declared operations change:
    building it costs milliseconds of the event loop (every spec's schema), which
    ten thousand jobs starting together cannot pay each, and jobs sharing one
    registry share its tools too (one tool JSON for all their runs, decision 0025)."""
    global _shared_default
    entries = declared.entries()
    key = tuple(id(e) for e in entries)
    if _shared_default is None or _shared_default[0] != key:
        _shared_default = (key, entries, default_registry())  # `entries` kept: their ids stay theirs
    return _shared_default[2]


_providers: RunVar[dict[str, Provider]] = RunVar("gormes_agent_job_providers")


def _shared_provider(spec: str) -> Provider:
    """One provider per model spec for the whole trio run (a worker's life), shared
    by every agent job's run: a real model's SDK client, and its pool of open
    connections, once per worker instead of once per job; the scripted provider's
    script read and checked once, not at every job's start (decision 0041).
    Providers keep no per-run state between calls (the scripted one counts a
    script's errors per task). Kept per trio run, not per process: an HTTP
    client's connections belong to the run that opened them."""
    try:
        cache = _providers.get()
    except LookupError:
        cache = {}
        _providers.set(cache)
    provider = cache.get(spec)
    if provider is None:
        provider = cache[spec] = open_provider(spec)
    return provider


def _executor(store: EventStore, operations: Registry | None) -> Executor:
    return Executor(operations or _default_operations(), store, workspace=os.environ.get(WORKSPACE_ENV) or None)


async def _earlier_run(store: EventStore, run_id: str | None) -> RecordedRun | None:
    """The RecordedRun of the previous attempt, or None (none, or it never started)."""
    if run_id is None:
        return None
    records = await store.read_stream(run_stream(run_id))
    return split_run(run_id, records) if records else None


async def _count_missed_tokens(ctx: JobContext, store: EventStore, job_records: list[Recorded]) -> None:
    """Give the job what earlier attempts' runs used and it was never given (a pause
    between a turn and its count; see `tokens.py`)."""

    async def read_run(run_id: str) -> list[Recorded]:
        return await store.read_stream(run_stream(run_id))

    missed = await missed_tokens(read_run, job_records, attempt_runs(job_records))
    if missed:
        await ctx.log("tokens earlier attempts used but the job was not given are counted now",
                      data={"missed_tokens": msgspec.to_builtins(total(missed))})
        for model in sorted(missed, key=lambda m: (m is not None, m or "")):
            await _to_job(ctx, missed[model], model)


async def _to_job(ctx: JobContext, tokens: Tokens, model: str | None) -> None:
    await ctx.tokens(input=tokens.input, output=tokens.output, cache_read=tokens.cache_read,
                     cache_write=tokens.cache_write, reasoning=tokens.reasoning, model=model)


async def _end_cut_off(ctx: JobContext, store: EventStore, run_id: str) -> None:
    """The earlier attempt's run has no end: its worker was lost (see `cut_off`)."""
    ended = await end_cut_off_runs(store, run_id, cut_off_reason(ctx.id))
    if ended:
        await ctx.log(f"run {run_id} was cut off with its attempt: recorded as cancelled",
                      data={"cut_off_runs": ended})


async def agent_job(ctx: JobContext, data: Any, *, operations: Registry | None = None) -> Any:
    """The `agent` job handler (install.py puts it in a worker's registry);
    `operations`: what its run may call (None: `default_registry()`)."""
    options, run_input = parse_job_data(data)
    store = ctx.store
    # Only a holder names a run or is given tokens in the job's log: on its first
    # claim no earlier attempt did either, and the log has nothing to read for them.
    job_records = [] if ctx.attempts_started <= 1 else await store.read_stream(job_stream(ctx.id))
    await _count_missed_tokens(ctx, store, job_records)
    earlier = await _earlier_run(store, last_attempt_run(job_records))
    if earlier is not None and earlier.end is not None and isinstance(earlier.end.event, RunCompleted):
        await ctx.log(f"run {earlier.run_id} had completed: its result is the job's",
                      data={"completed_run": earlier.run_id})
        return {"run_id": earlier.run_id, "result": earlier.end.event.result}
    if earlier is not None and earlier.end is None:
        await _end_cut_off(ctx, store, earlier.run_id)

    async def to_job(tokens: Tokens, model: str | None) -> None:
        # With the job's next inbox read, which the run makes before its next turn:
        # a step costs the job one transaction, not two (decision 0025). A turn with
        # no inbox read since the last (a subagent's, or a handler that reads none)
        # writes both now, so the job is never more than a turn behind; a park
        # writes them first (approvals.py), the attempt's end what is left (`_flushed`).
        ctx.tokens_later(tokens, model=model)
        if ctx.tokens_waiting > 1:
            await ctx.flush_tokens()

    def outside_reason() -> str | None:
        return f"job {ctx.abort_reason}" if ctx.abort_reason else None

    async with _flushed(ctx):
        return await _drive(ctx, store, options, run_input, earlier, operations, to_job, outside_reason)


@asynccontextmanager
async def _flushed(ctx: JobContext) -> AsyncIterator[None]:
    """Write the tokens the run reported since the job's last inbox read, however the
    attempt ends: shielded, so that a paused or cancelled attempt gives them too
    while its token still holds the job; a token that no longer does is refused
    (LockLost), and the next attempt counts them (`tokens.py`)."""
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            try:
                await ctx.flush_tokens()
            except LockLost:
                pass


async def _drive(
    ctx: JobContext, store: EventStore, options: AgentJobData, run_input: Any, earlier: RecordedRun | None,
    operations: Registry | None, to_job: Callable[[Tokens, str | None], Awaitable[None]],
    outside_reason: Callable[[], str | None],
) -> Any:
    """The attempt's run: `earlier` resumed, or a fresh one."""
    acts_for = run_identity(ctx.id, ctx.submitter)
    async with RunManager.open(store, executor=_executor(store, operations), providers=_shared_provider) as runs:
        run_id = runs.new_id()
        if earlier is not None and (earlier.end is None or earlier.end.type == "run.cancelled"):
            await ctx.log(f"run {run_id} resumes run {earlier.run_id}",
                          data={AGENT_RUN: run_id, "resumes": earlier.run_id})
            try:
                resumed = await resume_run(runs, earlier, run_id=run_id, job_id=ctx.id, token_sink=to_job,
                                           job=ctx, outside_reason=outside_reason,
                                           trust=acts_for.trust, memory_scope=acts_for.scope)
            except UserError as exc:  # ResumeRefused, or the handler or model is gone now
                await ctx.log(f"{exc}; starting afresh")
            else:
                return _result(resumed.outcome)
            run_id = runs.new_id()
        await ctx.log(f"run {run_id}", data={AGENT_RUN: run_id})
        try:
            handle = await runs.start(
                options.handler, run_input, model=options.model, tools=options.tools,
                max_iterations=options.max_iterations, deadline_s=options.deadline_s,
                trust=acts_for.trust, memory_scope=acts_for.scope, job_id=ctx.id, token_sink=to_job,
                job=ctx, run_id=run_id, outside_reason=outside_reason,
            )
        except UserError as exc:  # unknown handler, bad model spec: retrying will not help
            raise UnrecoverableError(str(exc)) from None
        return _result(await handle.outcome())


def _result(outcome: Any) -> Any:
    if outcome.status == "completed":
        return {"run_id": outcome.run_id, "result": outcome.result}
    raise RuntimeError(f"run {outcome.run_id} {outcome.status}: {outcome.error}")
