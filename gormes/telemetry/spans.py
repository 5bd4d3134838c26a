"""Spans from recorded events: pure functions over a run's or a job's stream.

A run is a span (`invoke_agent <handler>`), each model turn a `chat <model>` span
under it, each failed model attempt a `chat` span with status ERROR and an
`exception` event, each tool call an `execute_tool <operation>` span, following
the OpenTelemetry GenAI semantic conventions (`gen_ai.*`). A subagent's run span
is a child of its parent's run span; a job attempt (claim to its end) is a span,
and the run it drove is its child.

Ids are derived, never drawn: a trace id from the trace's root (`run:<id>` for a
run outside a job, `job:<id>` for a job and every run under it), a span id from
what the span is (`run:<id>`, `run:<id>:<seq>`, `job:<id>:<claim version>`). So
exporting the same run twice sends the same ids, and a child can name its
parent's span without reading it.

Times are the events' `recorded_at` (the end of a turn or a tool call; its start
is that minus its recorded `duration_ms`) and, for job attempts, the events' `at`.
A continuation's copied prefix (a fork, a resumed run: its first `copied`
observations) is left out: those turns were made, and are traced, in the run they
were copied from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal

import msgspec

from gormes.events.base import Recorded
from gormes.events.jobs import (
    JobAwaitingChildren, JobCancelled, JobClaimed, JobCompleted, JobFailed, JobReleased,
    JobStalled, JobSubmitted, JobTimedOut,
)
from gormes.events.runs import (
    RunCancelled, RunCompleted, RunFailed, RunLlmCut, RunLlmFailed, RunLlmTurn, RunStarted, RunToolCalled,
)

AttributeValue = str | int | float | bool | tuple[str, ...]
SpanKind = Literal["internal", "client"]
StatusCode = Literal["unset", "ok", "error"]


class SpanEvent(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    time_ns: int
    attributes: dict[str, AttributeValue] = {}


class Span(msgspec.Struct, frozen=True, kw_only=True):
    """One span, in the terms OTLP sends (ids as lowercase hex)."""

    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str | None
    name: str
    kind: SpanKind = "internal"
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue] = {}
    status: StatusCode = "unset"
    status_message: str = ""
    events: tuple[SpanEvent, ...] = ()


def trace_id(root: str) -> str:
    """The trace id of a trace rooted at `root` ("run:<id>" or "job:<id>")."""
    return _digest("gormes trace " + root, 32)


def span_id(key: str) -> str:
    return _digest("gormes span " + key, 16)


def run_span_id(run_id: str) -> str:
    return span_id(f"run:{run_id}")


def attempt_span_id(job_id: str, claim_version: int) -> str:
    return span_id(f"job:{job_id}:{claim_version}")


def _digest(text: str, digits: int) -> str:
    value = hashlib.sha256(text.encode()).hexdigest()[:digits]
    # An all-zero id is invalid in OTLP; one in 2^64 keys would give it.
    return value if value.strip("0") else "0" * (digits - 1) + "1"


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def _exception(error_type: str, message: str, at_ns: int) -> SpanEvent:
    return SpanEvent(name="exception", time_ns=at_ns,
                     attributes={"exception.type": error_type, "exception.message": message})


def provider_of(model_spec: str | None) -> str | None:
    """The provider of a run's model spec ("openai:gpt-4o" -> "openai")."""
    if not model_spec:
        return None
    return model_spec.split(":", 1)[0]


# -- runs -------------------------------------------------------------------------


def run_spans(
    records: Sequence[Recorded], *, trace: str, parent_span_id: str | None, copied: int = 0
) -> list[Span]:
    """The spans of one run: `records` is its own stream, in version order,
    starting with its `run.started`."""
    if not records or not isinstance(records[0].event, RunStarted):
        return []
    started: RunStarted = records[0].event  # type: ignore[assignment]
    run_id = started.run_id
    own = run_span_id(run_id)
    start_ns = _ns(records[0].recorded_at)
    provider = provider_of(started.model)
    spans: list[Span] = []
    previous_ns = start_ns
    end: Recorded | None = None
    for record in records[1:]:
        event, at_ns = record.event, _ns(record.recorded_at)
        seq = getattr(event, "seq", None)
        if isinstance(seq, int) and seq <= copied:
            previous_ns = at_ns
            continue
        if isinstance(event, RunLlmTurn):
            spans.append(_chat_span(event, run_id, trace, own, provider, at_ns, start_ns))
        elif isinstance(event, RunLlmFailed):
            spans.append(_failed_chat_span(event, run_id, trace, own, provider, started, previous_ns, at_ns))
        elif isinstance(event, RunLlmCut):
            spans.append(_cut_chat_span(event, record.position, run_id, trace, own, provider, at_ns, start_ns))
        elif isinstance(event, RunToolCalled):
            spans.append(_tool_span(event, run_id, trace, own, at_ns, start_ns))
        elif isinstance(event, (RunCompleted, RunFailed, RunCancelled)):
            end = record
        previous_ns = at_ns
    spans.insert(0, _run_span(started, records, end, trace, parent_span_id, start_ns, copied))
    return spans


def _run_span(
    started: RunStarted, records: Sequence[Recorded], end: Recorded | None, trace: str,
    parent: str | None, start_ns: int, copied: int,
) -> Span:
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": started.handler,
        "gen_ai.agent.id": started.run_id,
        "gormes.run.id": started.run_id,
        "gormes.run.depth": started.depth,
        "gormes.run.trust": started.trust,
    }
    if started.model:
        attributes["gormes.run.model"] = started.model
    if started.parent_run_id:
        attributes["gormes.run.parent_id"] = started.parent_run_id
    if started.job_id:
        attributes["gormes.job.id"] = started.job_id
    origin = started.resumed_from or started.forked_from
    if origin is not None:
        kind = "resumed_from" if started.resumed_from else "forked_from"
        attributes[f"gormes.run.{kind}"] = origin.run_id
        attributes["gormes.run.copied_observations"] = copied
    status: StatusCode = "unset"
    message = ""
    events: tuple[SpanEvent, ...] = ()
    if end is None:
        attributes["gormes.run.status"] = "running"
        end_ns = _ns(records[-1].recorded_at)
    else:
        event = end.event
        end_ns = _ns(end.recorded_at)
        tokens = event.tokens  # type: ignore[union-attr]
        attributes["gormes.run.tokens.input"] = tokens.input
        attributes["gormes.run.tokens.output"] = tokens.output
        attributes["gormes.run.tokens.cache_read"] = tokens.cache_read
        if isinstance(event, RunCompleted):
            attributes["gormes.run.status"] = "completed"
            status = "ok"
        elif isinstance(event, RunFailed):
            attributes["gormes.run.status"] = "failed"
            status, message = "error", event.error
            attributes["error.type"] = "run.failed"
            events = (_exception("RunFailed", event.error, end_ns),)
        else:
            assert isinstance(event, RunCancelled)
            attributes["gormes.run.status"] = "cancelled"
            attributes["gormes.run.cancel_reason"] = event.reason
    return Span(
        trace_id=trace, span_id=run_span_id(started.run_id), parent_span_id=parent,
        name=f"invoke_agent {started.handler}", start_ns=start_ns, end_ns=max(end_ns, start_ns),
        attributes=attributes, status=status, status_message=message, events=events,
    )


def _chat_span(
    turn: RunLlmTurn, run_id: str, trace: str, parent: str, provider: str | None,
    at_ns: int, run_start_ns: int,
) -> Span:
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": turn.model,
        "gen_ai.usage.input_tokens": turn.usage.input,
        "gen_ai.usage.output_tokens": turn.usage.output,
        "gen_ai.response.finish_reasons": (turn.reply.finish_reason,),
        "gormes.seq": turn.seq,
    }
    if turn.usage.cache_read:
        attributes["gen_ai.usage.cache_read.input_tokens"] = turn.usage.cache_read
    if turn.cache_write:
        attributes["gen_ai.usage.cache_creation.input_tokens"] = turn.cache_write
    if turn.reply.model:
        attributes["gen_ai.response.model"] = turn.reply.model
    if provider:
        attributes["gen_ai.provider.name"] = provider
    start_ns = max(run_start_ns, at_ns - turn.duration_ms * 1_000_000)
    return Span(
        trace_id=trace, span_id=span_id(f"run:{run_id}:{turn.seq}"), parent_span_id=parent,
        name=f"chat {turn.model}", kind="client", start_ns=start_ns, end_ns=at_ns,
        attributes=attributes,
    )


def _failed_chat_span(
    failed: RunLlmFailed, run_id: str, trace: str, parent: str, provider: str | None,
    started: RunStarted, previous_ns: int, at_ns: int,
) -> Span:
    # A failed attempt records no duration: it spans from the run's previous event.
    model = failed.model or started.model or ""
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "error.type": failed.error_type,
        "gormes.seq": failed.seq,
        "gormes.llm.attempt": failed.attempt,
        "gormes.llm.retryable": failed.retryable,
    }
    if failed.usage is not None:  # a reply the API billed and gormes could not use
        attributes["gen_ai.usage.input_tokens"] = failed.usage.input
        attributes["gen_ai.usage.output_tokens"] = failed.usage.output
    if provider:
        attributes["gen_ai.provider.name"] = provider
    return Span(
        trace_id=trace, span_id=span_id(f"run:{run_id}:{failed.seq}"), parent_span_id=parent,
        name=f"chat {model}".rstrip(), kind="client", start_ns=min(previous_ns, at_ns), end_ns=at_ns,
        attributes=attributes, status="error", status_message=failed.error,
        events=(_exception(failed.error_type, failed.error, at_ns),),
    )


def _cut_chat_span(
    cut: RunLlmCut, position: int, run_id: str, trace: str, parent: str, provider: str | None,
    at_ns: int, run_start_ns: int,
) -> Span:
    """A turn cut short after it was sent (decision 0080): what its stream had
    reported, which the API bills; an error span, named by its log position (the
    observation that may later take its seq, or another cut at it, is another)."""
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": cut.model,
        "error.type": "cancelled",
        "gormes.seq": cut.at_seq,
    }
    usage = cut.usage
    if usage is not None:
        attributes["gen_ai.usage.input_tokens"] = usage.input
        attributes["gen_ai.usage.output_tokens"] = usage.output
        if usage.cache_read:
            attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read
        if usage.cache_write:
            attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write
    if provider:
        attributes["gen_ai.provider.name"] = provider
    return Span(
        trace_id=trace, span_id=span_id(f"run:{run_id}:cut@{position}"), parent_span_id=parent,
        name=f"chat {cut.model}".rstrip(), kind="client",
        start_ns=max(run_start_ns, at_ns - cut.duration_ms * 1_000_000), end_ns=at_ns,
        attributes=attributes, status="error", status_message="cut short before its reply was read",
    )


def _tool_span(
    call: RunToolCalled, run_id: str, trace: str, parent: str, at_ns: int, run_start_ns: int,
) -> Span:
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.operation,
        "gormes.tool.outcome": call.outcome,
        "gormes.seq": call.seq,
    }
    status: StatusCode = "unset"
    message = ""
    events: tuple[SpanEvent, ...] = ()
    if call.outcome != "ok":
        error_type = call.error_type or call.outcome
        attributes["error.type"] = error_type
        status, message = "error", call.error or call.outcome
        events = (_exception(error_type, message, at_ns),)
    start_ns = max(run_start_ns, at_ns - call.duration_ms * 1_000_000)
    return Span(
        trace_id=trace, span_id=span_id(f"run:{run_id}:{call.seq}"), parent_span_id=parent,
        name=f"execute_tool {call.operation}", start_ns=start_ns, end_ns=at_ns,
        attributes=attributes, status=status, status_message=message, events=events,
    )


# -- job attempts -----------------------------------------------------------------

_ATTEMPT_ENDS = (JobCompleted, JobFailed, JobAwaitingChildren, JobStalled, JobTimedOut,
                 JobReleased, JobCancelled)


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """A job attempt as the spans see it: where its claim and its end sit in the log."""

    claim_version: int
    claim_position: int
    end_version: int | None  # None: still held
    span: Span


def job_attempts(records: Sequence[Recorded]) -> list[Attempt]:
    """Each attempt (a claim to the event that ended it) of one job, from its
    stream in version order; a job's attempts share the trace `job:<id>`."""
    if not records or not isinstance(records[0].event, JobSubmitted):
        return []
    submitted: JobSubmitted = records[0].event  # type: ignore[assignment]
    trace = trace_id(f"job:{submitted.job_id}")
    attempts: list[Attempt] = []
    number = 0
    open_claim: tuple[Recorded, JobClaimed] | None = None
    for record in records[1:]:
        event = record.event
        if isinstance(event, JobClaimed):
            number += 1
            open_claim = (record, event)
        elif open_claim is not None and isinstance(event, _ATTEMPT_ENDS):
            attempts.append(_attempt(submitted, trace, number, open_claim, record))
            open_claim = None
    if open_claim is not None:
        attempts.append(_attempt(submitted, trace, number, open_claim, None, last=records[-1]))
    return attempts


def _attempt(
    submitted: JobSubmitted, trace: str, number: int, claim: tuple[Recorded, JobClaimed],
    end: Recorded | None, last: Recorded | None = None,
) -> Attempt:
    claim_record, claimed = claim
    attributes: dict[str, AttributeValue] = {
        "gormes.job.id": submitted.job_id,
        "gormes.job.name": submitted.name,
        "gormes.job.queue": submitted.options.queue,
        "gormes.job.attempt": number,
        "gormes.job.worker_id": claimed.worker_id,
    }
    status: StatusCode = "unset"
    message = ""
    events: tuple[SpanEvent, ...] = ()
    if end is None:
        attributes["gormes.job.outcome"] = "active"
        assert last is not None
        end_ms = getattr(last.event, "at", claimed.at)
    else:
        event = end.event
        end_ms = event.at  # type: ignore[union-attr]
        outcome, error = _outcome(event)
        attributes["gormes.job.outcome"] = outcome
        if outcome == "completed" or outcome == "awaiting_children":
            status = "ok"
        elif error is not None:
            status, message = "error", error
            attributes["error.type"] = f"job.{outcome}"
            events = (SpanEvent(name="exception", time_ns=end_ms * 1_000_000,
                                attributes={"exception.type": f"job.{outcome}", "exception.message": error}),)
    span = Span(
        trace_id=trace, span_id=attempt_span_id(submitted.job_id, claim_record.version),
        parent_span_id=None, name=f"job {submitted.name}", start_ns=claimed.at * 1_000_000,
        end_ns=max(end_ms, claimed.at) * 1_000_000, attributes=attributes, status=status,
        status_message=message, events=events,
    )
    return Attempt(claim_version=claim_record.version, claim_position=claim_record.position,
                   end_version=None if end is None else end.version, span=span)


def _outcome(event: object) -> tuple[str, str | None]:
    """(outcome, error) of the event that ended an attempt; error None when it is none."""
    if isinstance(event, JobCompleted):
        return "completed", None
    if isinstance(event, JobAwaitingChildren):
        return "awaiting_children", None
    if isinstance(event, JobFailed):
        return ("retry" if event.status == "delayed" else event.status), event.error
    if isinstance(event, JobStalled):
        return "stalled", "lease expired (stalled)"
    if isinstance(event, JobTimedOut):
        return "timed_out", event.error
    if isinstance(event, JobReleased):
        return "released", None
    return "cancelled", None


def attempt_at(attempts: Sequence[Attempt], position: int) -> Attempt | None:
    """The attempt that held the job at `position` (the last claimed before it)."""
    found = None
    for attempt in attempts:
        if attempt.claim_position < position:
            found = attempt
    return found
