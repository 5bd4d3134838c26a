"""Job operations over the durable queue: job.submit, job.get, job.send, job.cancel,
and the listing and steering a remote caller needs: job.list, job.pause,
job.resume, job.inbox (open to operator, gateway and system; not to child agents:
a subagent steers only its own work).

They wrap `JobQueue` (gormes/actors/jobs/queue.py), which the executor hands over in
the context; without one they are refused. What they return is a `JobSummary`:
the job without its lock token, which only the holding worker may see. A message
sent with job.send is signed by the caller (`Caller.sender`): "operator" for the
operator, else the job the caller acts for, so the queue's rule (only an
operator or the job's parent may write to its inbox) applies to models too.

Each job records the caller that submitted it (`Submitter`); a gateway or child
agent gets, reads and cancels only its own jobs, may not submit an `agent` job
(run.submit is the one route into a run), puts its jobs only on the queues the
operator lists (`GORMES_GATEWAY_QUEUES`) and reads its concurrency key as it gave
it: gormes/tools/job_trust.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec

from gormes.actors.jobs.rules import validate_options
from gormes.actors.jobs.state import InvalidJob, JobNotFound, SendRefused
from gormes.events.jobs import MAX_NAME_LENGTH, STATUSES, JobOptions, Submitter, Tokens
from gormes.tools.agent_job_data import AGENT_JOB, check_submission
from gormes.tools.job_trust import (
    check_job_submit, check_size, data_cap, key_as_given, live_jobs_check, own_options, owner_key, privileged,
    require_may_act_on, submitter_of,
)
from gormes.ops.spec import (
    Caller, InvalidOperationInput, OperationContext, OperationDenied, OperationSpec, OperationUnavailable,
)

JobId = Annotated[str, msgspec.Meta(min_length=1, description="The job's id.")]
Limit = Annotated[int, msgspec.Meta(ge=1, le=500, description="At most this many, newest first.")]
JobStatus = Literal[STATUSES]  # type: ignore[valid-type]
# A job.list page holds at most this many bytes of its jobs' data, results,
# progress and errors (and at least one job): four jobs of a gateway's largest data
# (MAX_UNTRUSTED_DATA_BYTES), shell.run's largest output (decision 0076). A
# job.inbox page, of its messages' payloads (its addendum).
LIST_PAGE_BYTES = 4 * 1024 * 1024
Cursor = Annotated[str, msgspec.Meta(
    max_length=100,  # a page's `next`: digits, a colon, a job's id
    description="The `next` of the page before: list the jobs after that page's last.",
)]

STEERING = frozenset({"operator", "gateway", "system"})


class JobSummary(msgspec.Struct, kw_only=True):
    id: str
    name: str
    queue: str
    status: str
    priority: int
    data: Any = None
    result: Any = None
    error: str | None = None
    progress: Any = None
    attempts_made: int = 0
    max_attempts: int = 3
    parent_id: str | None = None
    depth: int = 0
    live_children: int = 0
    tokens: Tokens = Tokens()
    created_at: int = 0
    started_at: int | None = None
    finished_at: int | None = None
    submitter: Submitter | None = None  # who submitted it (None: not recorded)
    coalesced: bool = False
    # A gateway or child agent reads its own key as it gave it, not as stored
    # (`summary`); the limit is the one it gave, or 1.
    concurrency_key: str | None = None
    concurrency_limit: int | None = None


def summary(job: Any, caller: Caller) -> JobSummary:
    """The job as `caller` reads it: for a gateway or child agent, its concurrency
    key without the prefix it was recorded under (decision 0066)."""
    shown = msgspec.convert(job, JobSummary, from_attributes=True)
    key = key_as_given(caller, shown.concurrency_key)
    return shown if key == shown.concurrency_key else msgspec.structs.replace(shown, concurrency_key=key)


def queue_of(ctx: OperationContext) -> Any:
    if ctx.jobs is None:
        raise OperationUnavailable("no job queue is configured: the job operations are off")
    return ctx.jobs


class JobSubmitInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Submit a durable job."""

    name: Annotated[str, msgspec.Meta(
        min_length=1, max_length=MAX_NAME_LENGTH, description="The job handler's name."
    )]
    data: Any = None
    options: JobOptions | None = None


def _in_range(options: JobOptions) -> JobOptions:
    """Options out of range are bad input (the queue checks again on submit)."""
    try:
        return validate_options(options)
    except InvalidJob as exc:
        raise InvalidOperationInput(str(exc)) from None


def job_submit_caps(caller: Caller, value: JobSubmitInput) -> None:
    """job.submit's `check_input` (decision 0088): its options in range, and what a
    gateway or child agent may not submit (gormes/tools/job_trust.py: an `agent` job,
    a negative priority, data over its cap, a concurrency key too long, a queue the
    operator does not list), refused before an approval request records the input."""
    options = own_options(caller, _in_range(value.options or JobOptions()))
    check_job_submit(caller, value.name, value.data, options.priority)


async def job_submit(ctx: OperationContext, value: JobSubmitInput) -> JobSummary:
    """Submit as the caller (its Submitter is recorded); see gormes/tools/job_trust.py
    for what a gateway or child agent may not submit (held to it by `job_submit_caps`)."""
    queue = queue_of(ctx)
    options = own_options(ctx.caller, _in_range(value.options or JobOptions()))
    if value.name == AGENT_JOB:  # refused here, not left to die in a worker (decision 0090)
        # Lazy: builtin lists this module's operations.
        from gormes.tools.builtin import default_registry

        check_submission(value.data, default_registry())
    if options.parent_id is not None and not privileged(ctx.caller):
        parent = await queue.get(options.parent_id)
        if parent is not None:  # an unknown parent: the queue refuses it
            require_may_act_on(ctx.caller, parent, "attach a child to")
    submitter = submitter_of(ctx.caller)
    check = live_jobs_check(ctx.caller)
    # max_waiting counts, and answers with, only a gateway's or child agent's own
    # waiting jobs: whether it coalesces says nothing of anyone else's (decision 0076).
    job = await queue.submit(
        value.name, value.data, options, submitter=submitter, check=check, merge_cap=data_cap(ctx.caller),
        waiting_of=None if privileged(ctx.caller) else owner_key(ctx.caller),
    )
    return summary(job, ctx.caller)


async def _owned(ctx: OperationContext, job_id: str, what: str) -> Any:
    """The job's queue, once the caller may `what` the job (see job_trust)."""
    queue = queue_of(ctx)
    if not privileged(ctx.caller):
        job = await queue.get(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id}")
        require_may_act_on(ctx.caller, job, what)
    return queue


class JobGetInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Look a job up by id."""

    id: JobId


async def job_get(ctx: OperationContext, value: JobGetInput) -> JobSummary:
    job = await queue_of(ctx).get(value.id)
    if job is None:
        raise JobNotFound(f"no job {value.id}")
    require_may_act_on(ctx.caller, job, "read")
    return summary(job, ctx.caller)


class JobSendInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Put a message in a running job's inbox."""

    id: JobId
    payload: Any


class MessageSent(msgspec.Struct, kw_only=True):
    id: str
    job_id: str
    sender: str
    sent_at: int


def message_caps(caller: Caller, value: Any) -> None:
    """job.send's and run.send's `check_input` (decision 0088): a gateway's or child
    agent's message is at most its cap of JSON."""
    check_size(caller, value.payload, "the message")


async def job_send(ctx: OperationContext, value: JobSendInput) -> MessageSent:
    try:
        message = await queue_of(ctx).send(value.id, value.payload, sender=ctx.caller.sender)
    except SendRefused as exc:  # a refusal, audited `denied` as every other
        raise OperationDenied(str(exc)) from None
    return MessageSent(id=message.id, job_id=message.job_id, sender=message.sender, sent_at=message.sent_at)


class JobCancelInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Cancel a job and all its live descendants."""

    id: JobId


class JobCancelled(msgspec.Struct, kw_only=True):
    cancelled: list[str]  # the job first, then the descendants cancelled with it


async def job_cancel(ctx: OperationContext, value: JobCancelInput) -> JobCancelled:
    queue = await _owned(ctx, value.id, "cancel")
    return JobCancelled(cancelled=await queue.cancel(value.id))


# -- listing and steering (open to operator, gateway and system; not to child agents) --
class JobListInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """List jobs, newest first, optionally by status, queue or handler name, a page at a time."""

    status: JobStatus | None = None
    queue: str | None = None
    name: str | None = None
    limit: Limit = 50
    before: Cursor | None = None


class JobList(msgspec.Struct, kw_only=True):
    jobs: list[JobSummary]
    # Where the next page starts (pass it as `before`); None: no more jobs match.
    next: str | None = None


def _position(cursor: str | None, field: str = "before", operation: str = "job.list") -> tuple[int, str] | None:
    """A page's `next` read back: the (time, id) of the last row it held."""
    if cursor is None:
        return None
    at, _, row_id = cursor.partition(":")
    if not (at.isascii() and at.isdigit() and int(at) < 2**63 and row_id):
        raise InvalidOperationInput(f"{field} must be the `next` of a {operation} page")
    return int(at), row_id


async def job_list(ctx: OperationContext, value: JobListInput) -> JobList:
    """Every job for an operator or the system; a caller's own jobs for the others.
    A page holds at most `limit` jobs and, past its first, `LIST_PAGE_BYTES` of their
    data, results, progress and errors, for every caller (decision 0076)."""
    owner = None if privileged(ctx.caller) else owner_key(ctx.caller)
    page = await queue_of(ctx).list_page(
        status=value.status, queue=value.queue, name=value.name, limit=value.limit, owner=owner,
        before=_position(value.before), max_bytes=LIST_PAGE_BYTES,
    )
    last = page.jobs[-1] if page.more else None
    return JobList(
        jobs=[summary(job, ctx.caller) for job in page.jobs],
        next=None if last is None else f"{last.created_at}:{last.id}",
    )


class JobIdInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: JobId


async def job_pause(ctx: OperationContext, value: JobIdInput) -> JobSummary:
    return summary(await (await _owned(ctx, value.id, "pause")).pause(value.id), ctx.caller)


async def job_resume(ctx: OperationContext, value: JobIdInput) -> JobSummary:
    return summary(await (await _owned(ctx, value.id, "resume")).resume(value.id), ctx.caller)


class InboxEntry(msgspec.Struct, kw_only=True):
    id: str
    sender: str
    payload: Any
    sent_at: int
    read_at: int | None = None


class JobInboxInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Read a job's inbox, read messages and unread, oldest first, a page at a time."""

    id: JobId
    limit: Annotated[int, msgspec.Meta(ge=1, le=500, description="At most this many, oldest first.")] = 50
    after: Annotated[str, msgspec.Meta(
        max_length=100,  # a page's `next`: digits, a colon, a message's id
        description="The `next` of the page before (or a message's `sent_at:id`): read the messages after it.",
    )] | None = None


class JobInbox(msgspec.Struct, kw_only=True):
    job_id: str
    messages: list[InboxEntry]
    # Where the next page starts (pass it as `after`); None: no more messages yet.
    next: str | None = None


async def job_inbox(ctx: OperationContext, value: JobInboxInput) -> JobInbox:
    """A page of the job's inbox, oldest first, as it was sent and is read: at most
    `limit` messages and, past the first, `LIST_PAGE_BYTES` of their payloads, for
    every caller (decision 0076's addendum). A message sent later is on a later page,
    so a reader's pages never shift under it."""
    queue = await _owned(ctx, value.id, "read the inbox of")
    if await queue.get(value.id) is None:
        raise JobNotFound(f"no job {value.id}")
    page = await queue.inbox_page(
        value.id, value.limit, after=_position(value.after, "after", "job.inbox"), max_bytes=LIST_PAGE_BYTES,
    )
    last = page.messages[-1] if page.more else None
    return JobInbox(
        job_id=value.id,
        messages=[msgspec.convert(m, InboxEntry, from_attributes=True) for m in page.messages],
        next=None if last is None else f"{last.sent_at}:{last.id}",
    )


def steering_spec(name: str, description: str, input_type: type, output_type: type, handler: Any, *,
          writes: bool, audit_kind: str, checks: tuple[str, ...],
          check_input: Callable[[Caller, Any], None] | None = None) -> OperationSpec:
    """A prompt-visible operation open to the steering classes (not to child agents);
    a reader is idempotent, a writer is not. tools/runs.py builds its specs with it too."""
    return OperationSpec(
        name=name, description=description, input_type=input_type, output_type=output_type,
        handler=handler, trust=STEERING, audit_kind=audit_kind, mutating=writes,
        idempotent=not writes, prompt_visible=True, timeout=10.0, doctor_checks=checks,
        check_input=check_input,
    )


_QUEUE = ("job-queue",)
_EVERYONE = frozenset({"operator", "gateway", "child-agent", "system"})

SPECS = (
    OperationSpec(
        name="job.submit", description="Submit a durable job to the queue; returns the job.",
        input_type=JobSubmitInput, output_type=JobSummary, handler=job_submit, trust=_EVERYONE,
        audit_kind="job.write", mutating=True, idempotent=False, prompt_visible=True,
        timeout=10.0, doctor_checks=("job-queue",), check_input=job_submit_caps,
    ),
    OperationSpec(
        name="job.get", description="Get a job's status, result or error by id.",
        input_type=JobGetInput, output_type=JobSummary, handler=job_get, trust=_EVERYONE,
        audit_kind="job.read", prompt_visible=True, timeout=10.0, doctor_checks=("job-queue",),
    ),
    OperationSpec(
        name="job.send", description="Send a message to a job's inbox (you must be its parent).",
        input_type=JobSendInput, output_type=MessageSent, handler=job_send, trust=_EVERYONE,
        audit_kind="job.write", mutating=True, idempotent=False, prompt_visible=True,
        timeout=10.0, doctor_checks=("job-queue",), check_input=message_caps,
    ),
    OperationSpec(
        # Not for child agents: a subagent must not cancel work it does not own.
        name="job.cancel", description="Cancel a job and its live descendants.",
        input_type=JobCancelInput, output_type=JobCancelled, handler=job_cancel,
        trust=frozenset({"operator", "gateway", "system"}), audit_kind="job.write",
        mutating=True, idempotent=False, prompt_visible=True, timeout=10.0,
        doctor_checks=("job-queue",),
    ),
    steering_spec("job.list", "List jobs, newest first (filter by status, queue, handler name), a page at a"
          " time: at most `limit` jobs and 4 MiB of their data and results; `next` continues it.",
          JobListInput, JobList, job_list, writes=False, audit_kind="job.read", checks=_QUEUE),
    steering_spec("job.pause", "Pause a waiting, delayed or active job (its progress is kept).",
          JobIdInput, JobSummary, job_pause, writes=True, audit_kind="job.write", checks=_QUEUE),
    steering_spec("job.resume", "Resume a paused job: it waits to be claimed again.",
          JobIdInput, JobSummary, job_resume, writes=True, audit_kind="job.write", checks=_QUEUE),
    steering_spec("job.inbox", "Read a job's inbox, read or not, oldest first, a page at a time: at most"
          " `limit` messages and 4 MiB of their payloads; `next` continues it.",
          JobInboxInput, JobInbox, job_inbox, writes=False, audit_kind="job.read", checks=_QUEUE),
)

