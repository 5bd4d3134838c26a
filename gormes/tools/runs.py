"""Run operations: start an agent run as a job, read, list and message runs.

run.submit, run.get, run.list, run.timeline and run.send: what a remote caller (an
MCP client, a gateway) needs to start and follow agent runs. The job side of
steering (job.list, job.pause, job.resume, job.inbox) is in gormes/tools/jobs.py.

Trust: every one is open to `operator`, `gateway` and `system`, and none to
`child-agent`: a subagent steers only its own work (spawn, its inbox), never
other runs. All are prompt-visible, so a gateway is offered them; a gateway's
calls reach only its own jobs and runs (gormes/tools/job_trust.py,
gormes/tools/run_trust.py).

run.submit starts an agent run as a durable `agent` job (gormes/actors/agent_jobs/handler.py),
and is the only route into a run for a gateway or child agent (job.submit refuses
them an `agent` job). The run may use only tools the submitting caller's trust
class could call itself: a named tool outside that set is refused, and no tools
named means exactly that set. So a gateway caller cannot reach, through an agent,
what it may not call. Nor may it choose the model (but one the operator allows),
put the run on a queue the operator does not list for it (`GORMES_GATEWAY_QUEUES`)
or jump the queue: gormes/tools/job_trust.py.

Reading, listing and messaging a run (run.get, run.timeline, run.list, run.send)
is for the caller it acts for, an operator or the system only:
gormes/tools/run_trust.py. run.timeline answers a page of the run's timeline, as
job.list and job.inbox do (decision 0088). run.send writes to a run's own inbox
(`run.message_sent`), signed with the caller's sender name; the agent reads it at
its next turn.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from gormes.events.jobs import MAX_DELAY_MS, MAX_KEY_LENGTH, MAX_NAME_LENGTH, PRIORITY_RANGE, JobOptions, Tokens
from gormes.ops.spec import Caller, OperationContext, OperationDenied, OperationUnavailable
from gormes.ops.tool_names import check_tools
from gormes.tools.agent_job_data import WORKER_TOOLS
from gormes.tools.job_trust import (
    GATEWAY_QUEUES_ENV, check_model, check_priority, check_size, data_cap, live_jobs_check, own_queue, submitter_of,
)
from gormes.tools.jobs import LIST_PAGE_BYTES, JobSummary, Limit, message_caps, queue_of, steering_spec, summary
from gormes.tools.run_trust import own_runs_filter, require_acts_for

RunId = Annotated[str, msgspec.Meta(min_length=1, description="The run's id.")]
RunStatus = Literal["running", "completed", "failed", "cancelled"]

AGENT_JOB = "agent"


def _store(ctx: OperationContext) -> Any:
    if ctx.store is None:
        raise OperationUnavailable("no event store is configured: the run operations are off")
    return ctx.store


MAX_PROMPT_LENGTH = 1_000_000  # characters, for the prompt and the system prompt alike
MAX_RUN_ITERATIONS = 1000
Priority = Annotated[int, msgspec.Meta(ge=PRIORITY_RANGE[0], le=PRIORITY_RANGE[1], description="Lower runs first.")]


class RunSubmitInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Start an agent run as a durable job; a worker runs it."""

    prompt: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PROMPT_LENGTH, description="The agent's task.")]
    system: Annotated[str, msgspec.Meta(max_length=MAX_PROMPT_LENGTH)] | None = None
    model: Annotated[str | None, msgspec.Meta(
        description="scripted:PATH or openai:MODEL (gateways: only one the operator allows).",
    )] = None
    tools: Annotated[
        list[str] | None,
        msgspec.Meta(description="Tool allowlist; default: every tool your trust class may use."),
    ] = None
    max_iterations: Annotated[int, msgspec.Meta(ge=1, le=MAX_RUN_ITERATIONS)] | None = None
    deadline_s: Annotated[float, msgspec.Meta(gt=0, le=MAX_DELAY_MS / 1000)] | None = None
    queue: Annotated[str, msgspec.Meta(
        min_length=1, max_length=MAX_NAME_LENGTH,
        description=f"The job's queue. A gateway's must be one the operator lists in {GATEWAY_QUEUES_ENV};"
                    " `default`, when not listed, means the first listed.",
    )] = "default"
    priority: Priority = 0
    idempotency_key: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_KEY_LENGTH)] | None = None


def tools_for(trust: str, asked: list[str] | None) -> list[str]:
    """The run's tool allowlist: `asked`, if the trust class may use every one of
    them, else a refusal; without `asked`, every tool the class may use."""
    from gormes.tools.builtin import default_registry

    registry = default_registry()
    allowed = [tool.name for tool in registry.tool_schemas(trust)]
    if asked is None:
        return allowed
    # a name no operation has is bad input, said as such, before the trust check
    check_tools(asked, (spec.name for spec in registry.list()), "tools", unchecked_prefixes=WORKER_TOOLS)
    refused = sorted(set(asked) - set(allowed))
    if refused:
        raise OperationDenied(f"a {trust!r} caller may not give a run the tools {', '.join(refused)}")
    return list(asked)


def _run_data(caller: Caller, value: RunSubmitInput) -> dict[str, Any]:
    """The data of the `agent` job run.submit records."""
    data: dict[str, Any] = {"handler": AGENT_JOB, "prompt": value.prompt, "tools": tools_for(caller.trust, value.tools)}
    for key in ("system", "model", "max_iterations", "deadline_s"):
        if getattr(value, key) is not None:
            data[key] = getattr(value, key)
    return data


def run_submit_caps(caller: Caller, value: RunSubmitInput) -> None:
    """run.submit's `check_input` (decision 0088): its tools, model, queue and
    priority against the caller's trust class, and its job's data against a gateway's
    cap (gormes/tools/job_trust.py), before an approval request records the input."""
    check_model(caller, value.model)
    check_priority(caller, value.priority)
    own_queue(caller, value.queue)
    check_size(caller, _run_data(caller, value), "the run's job data")  # an allowlist repeated, two huge prompts


async def run_submit(ctx: OperationContext, value: RunSubmitInput) -> JobSummary:
    """The one route into a run for every caller: held to `run_submit_caps` before
    anything is recorded or read, and the job records the caller as its submitter."""
    caller = ctx.caller
    queue_name = own_queue(caller, value.queue)
    data = _run_data(caller, value)
    options = JobOptions(queue=queue_name, priority=value.priority, idempotency_key=value.idempotency_key)
    queue, submitter = queue_of(ctx), submitter_of(caller)
    check = live_jobs_check(caller)
    job = await queue.submit(AGENT_JOB, data, options, submitter=submitter, check=check)
    return summary(job, caller)


class RunIdInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    run_id: RunId


class RunSummary(msgspec.Struct, kw_only=True):
    run_id: str
    handler: str
    status: RunStatus
    depth: int
    parent_run_id: str | None
    job_id: str | None
    model: str | None
    trust: str
    scope: str | None  # the memory scope its tool calls are pinned to (None: its class's default)
    input: Any
    started_at: float
    finished_at: float | None
    result: Any
    error: str | None
    iterations: int
    tokens: Tokens
    cost: float | None
    pricing: str  # the table the cost was priced with (docs/providers.md)
    children: list[str]  # child run ids


class RunTimelineInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A page of a run's timeline, oldest first."""

    run_id: RunId
    limit: Annotated[int, msgspec.Meta(ge=1, le=500, description="At most this many entries, oldest first.")] = 100
    after: Annotated[int, msgspec.Meta(
        ge=0, le=2**63 - 1, description="The `next` of the page before (an entry's position): the entries after it.",
    )] | None = None


class RunTimeline(RunSummary, kw_only=True):
    # A page of its entries, oldest first: one per model turn, tool call, inbox read,
    # message, child, log line and the end; every entry has position, type and seq
    # (see `gormes runs show`). At most `limit` of them and, past the first,
    # LIST_PAGE_BYTES of their JSON (decision 0088).
    timeline: list[dict[str, Any]]
    # Where the next page starts (pass it as `after`); None: no entry is left out.
    next: int | None = None


async def _run_view(ctx: OperationContext, run_id: str, page: Any = None) -> dict[str, Any]:
    # The read model `gormes runs show` prints, folded from the run's own stream.
    from gormes.actors.runs.timeline import run_view

    return await run_view(_store(ctx), run_id, tree=False, page=page)


async def run_get(ctx: OperationContext, value: RunIdInput) -> RunSummary:
    from gormes.actors.runs.timeline import NO_ENTRIES  # lazy for start-up time, as _run_view

    await require_acts_for(ctx.caller, _store(ctx), value.run_id, "read")
    return msgspec.convert(await _run_view(ctx, value.run_id, NO_ENTRIES), RunSummary)


async def run_timeline(ctx: OperationContext, value: RunTimelineInput) -> RunTimeline:
    """A page of the run's timeline, for every caller (decision 0088): a gateway fed its
    own run 1 MiB messages, and one call answered 124 MB. `gormes runs show`, the
    operator's read of its own log, is not the operation and shows the whole run."""
    from gormes.actors.runs.timeline import TimelinePage  # lazy for start-up time, as _run_view

    await require_acts_for(ctx.caller, _store(ctx), value.run_id, "read")
    page = TimelinePage(after=value.after, limit=value.limit, max_bytes=LIST_PAGE_BYTES)
    return msgspec.convert(await _run_view(ctx, value.run_id, page), RunTimeline)


class RunListInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """List runs, newest first, optionally of one job or with one status."""

    job_id: str | None = None
    status: RunStatus | None = None
    limit: Limit = 50


class RunRow(msgspec.Struct, kw_only=True):
    run_id: str
    parent_run_id: str | None
    job_id: str | None
    handler: str
    status: str
    depth: int
    started_at: float
    finished_at: float | None
    iterations: int
    tokens_input: int
    tokens_output: int
    error: str | None


class RunList(msgspec.Struct, kw_only=True):
    runs: list[RunRow]


async def run_list(ctx: OperationContext, value: RunListInput) -> RunList:
    # Lazy for start-up time: loaded on first use, not with the registry.
    from gormes.projections.runner import ProjectionRunner
    from gormes.projections.runs import TABLE, runs

    store = _store(ctx)
    await ProjectionRunner(store, runs).catch_up()
    columns = list(RunRow.__struct_fields__)
    where, params = [], []
    for column, wanted in (("job_id", value.job_id), ("status", value.status)):
        if wanted is not None:
            where.append(f"{column} = ?")
            params.append(wanted)

    def select(conn: Any) -> list[Any]:
        own = own_runs_filter(conn, ctx.caller)  # a gateway lists only the runs that act for it
        conditions, values = (where + [own[0]], params + own[1]) if own else (where, params)
        sql = f"SELECT {', '.join(columns)} FROM {TABLE}" + (" WHERE " + " AND ".join(conditions) if conditions else "")
        sql += " ORDER BY started_at DESC, run_id DESC LIMIT ?"
        return conn.execute(sql, (*values, value.limit)).fetchall()

    rows = await store.read_sql(select)
    return RunList(runs=[msgspec.convert(dict(zip(columns, row)), RunRow) for row in rows])


class RunSendInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Put a message in a running run's inbox; the agent reads it at its next turn."""

    run_id: RunId
    payload: Any


class RunMessage(msgspec.Struct, kw_only=True):
    message_id: str
    run_id: str
    sender: str


async def run_send(ctx: OperationContext, value: RunSendInput) -> RunMessage:
    # Lazy for start-up time: loaded on first use, not with the registry.
    from gormes.actors.runs.manager import send_message

    from gormes.actors.runs.actor import InboxFull

    await require_acts_for(ctx.caller, _store(ctx), value.run_id, "message")  # its size: message_caps
    sender = ctx.caller.sender
    try:
        # A gateway's unread messages to a run hold at most its cap on job data: the
        # run reads them all in one turn, one `run.inbox_read` (decision 0074).
        message_id = await send_message(_store(ctx), value.run_id, value.payload, sender=sender, clock=ctx.clock,
                                         max_unread_bytes=data_cap(ctx.caller))
    except InboxFull as exc:
        raise OperationDenied(str(exc)) from None
    return RunMessage(message_id=message_id, run_id=value.run_id, sender=sender)


# -- the specs --------------------------------------------------------------------

_QUEUE = ("job-queue",)

SPECS = (
    steering_spec("run.submit", "Start an agent run as a durable job; returns the job (its result names the run).",
          RunSubmitInput, JobSummary, run_submit, writes=True, audit_kind="job.write", checks=_QUEUE,
          check_input=run_submit_caps),
    steering_spec("run.get", "Get a run's status, result or error, tokens and cost by run id.",
          RunIdInput, RunSummary, run_get, writes=False, audit_kind="run.read", checks=()),
    steering_spec("run.list", "List runs, newest first (filter by job id or status).",
          RunListInput, RunList, run_list, writes=False, audit_kind="run.read", checks=()),
    steering_spec("run.timeline", "A run's timeline (model turns, tool calls, inbox, children, its end), a page"
          " at a time: at most `limit` entries and 4 MiB of them; `next` continues it.",
          RunTimelineInput, RunTimeline, run_timeline, writes=False, audit_kind="run.read", checks=()),
    steering_spec("run.send", "Send a message to a running run's inbox; the agent reads it at its next turn.",
          RunSendInput, RunMessage, run_send, writes=True, audit_kind="run.write", checks=(),
          check_input=message_caps),
)
