"""Reading the spans of a run or of a job's attempts from the log.

Blocking functions over one `EventLog` (what `store.read_with` hands over), on
either backend: a run's stream, the `run.started` of each of its ancestors (to
find the trace's root and its trace id) and, for a run under a job, the job's
stream (to find the attempt span it belongs under).
"""

from __future__ import annotations

from collections.abc import Iterable

from gormes.actors.runs.costs import copied_counts
from gormes.events.jobs import job_stream
from gormes.events.store import EventLog
from gormes.events.run_export import UnknownRun
from gormes.events.runs import RunChildSpawned, RunStarted, run_stream
from gormes.telemetry.spans import (
    Span, attempt_at, job_attempts, run_span_id, run_spans, trace_id,
)

_MAX_DEPTH = 1000  # a parent chain longer than this is a loop in bad data


def _started(log: EventLog, run_id: str) -> RunStarted | None:
    rows = log.read_all(types=["run.started"], streams=[run_stream(run_id)], limit=1)
    event = rows[0].event if rows else None
    return event if isinstance(event, RunStarted) else None


def _root(log: EventLog, started: RunStarted) -> RunStarted:
    current = started
    for _ in range(_MAX_DEPTH):
        if not current.parent_run_id:
            return current
        parent = _started(log, current.parent_run_id)
        if parent is None:
            return current
        current = parent
    return current


def run_trace(
    log: EventLog, run_id: str, *, children: bool = False, with_attempt: bool = False
) -> list[Span]:
    """The run's spans (its descendants' too with `children`); with `with_attempt`,
    a run under a job also brings the span of the job attempt it ran in.

    Raises `UnknownRun` when the run has no events."""
    own = log.read_stream(run_stream(run_id))
    if not own:
        raise UnknownRun(f"no run {run_id!r} in the log (no events on stream {run_stream(run_id)!r})")
    started = own[0].event
    if not isinstance(started, RunStarted):
        raise UnknownRun(f"stream {run_stream(run_id)!r} does not start with run.started")
    root = _root(log, started)
    trace = trace_id(f"job:{root.job_id}" if root.job_id else f"run:{root.run_id}")
    spans: list[Span] = []
    parent: str | None = None
    if started.parent_run_id:
        parent = run_span_id(started.parent_run_id)
    elif started.job_id:
        attempt = attempt_at(job_attempts(log.read_stream(job_stream(started.job_id))), own[0].position)
        if attempt is not None:
            parent = attempt.span.span_id
            if with_attempt:
                spans.append(attempt.span)
    spans += _with_children(log, own, trace, parent, children)
    return spans


def _with_children(log: EventLog, own: list, trace: str, parent: str | None, children: bool) -> list[Span]:
    run_id = own[0].event.run_id
    copied = copied_counts(log.sql, [run_id]).get(run_id, 0)
    spans = run_spans(own, trace=trace, parent_span_id=parent, copied=copied)
    if children:
        for child in _spawned(own):
            rows = log.read_stream(run_stream(child))
            if rows and isinstance(rows[0].event, RunStarted):
                spans += _with_children(log, rows, trace, run_span_id(run_id), True)
    return spans


def _spawned(records: Iterable) -> list[str]:
    return list(dict.fromkeys(r.event.child_run_id for r in records if isinstance(r.event, RunChildSpawned)))


def attempt_spans(log: EventLog, job_id: str, end_versions: Iterable[int] | None = None) -> list[Span]:
    """The job's attempt spans; with `end_versions`, only the attempts that the
    events at those versions of its stream ended."""
    attempts = job_attempts(log.read_stream(job_stream(job_id)))
    if end_versions is None:
        return [a.span for a in attempts]
    wanted = set(end_versions)
    return [a.span for a in attempts if a.end_version in wanted]
