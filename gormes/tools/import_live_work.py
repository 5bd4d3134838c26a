"""Live work an import would bring in: jobs not ended and cron schedules not removed.

An imported `job.submitted` names its submitter, and an imported `cron.scheduled`
the trust its fires carry. Once imported, a worker runs such a job, and the daemon
fires such a schedule, with the trust the record names, whoever wrote the file.
So an import that leaves a job or a schedule live is refused unless the operator
says it brings live work on purpose (`gormes import --live-work`): restoring a
host's own export, say. History (ended jobs, removed schedules, runs, memory) is
imported as before.

The check reads, inside the import's transaction, each job and cron stream the
import touched, as the import left it (events already there included).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gormes.actors.cron import rules as cron_rules
from gormes.actors.jobs.state import evolve as evolve_job
from gormes.events.cron import CRON_STREAM_PREFIX
from gormes.events.jobs import JobSubmitted, job_stream

JOB_STREAM_PREFIX = job_stream("")
SHOWN = 3  # live items named in the refusal; the rest are counted


def touches_live_work(stream: str) -> bool:
    return stream.startswith((JOB_STREAM_PREFIX, CRON_STREAM_PREFIX))


def live_work(tx: Any, streams: Iterable[str]) -> list[str]:
    """What the touched `streams` leave live, one phrase each ("job J (waiting, as
    operator)"), in stream order; empty when the import brings only history."""
    found = []
    for stream in sorted(s for s in set(streams) if touches_live_work(s)):
        events = [record.event for record in tx.read_stream(stream)]
        phrase = _job(events) if stream.startswith(JOB_STREAM_PREFIX) else _schedule(events)
        if phrase is not None:
            found.append(phrase)
    return found


def _job(events: list[Any]) -> str | None:
    state = None
    for event in events:
        if state is not None or isinstance(event, JobSubmitted):  # a stream so named may hold other events
            state = evolve_job(state, event)
    if state is None or state.terminal:
        return None
    submitter = f"submitted as {state.submitter.trust}" if state.submitter is not None else "no submitter"
    return f"job {state.id} ({state.status}, {submitter})"


def _schedule(events: list[Any]) -> str | None:
    state = None
    for event in events:
        state = cron_rules.evolve(state, event)
    if state is None or not state.live:
        return None
    return f"cron schedule {state.name} ({state.status})"


def refusal(name: str, found: list[str]) -> str:
    shown = ", ".join(found[:SHOWN]) + (f" and {len(found) - SHOWN} more" if len(found) > SHOWN else "")
    return (f"{name} holds live work: {shown}; once imported, a worker or the daemon runs it with the"
            " trust its records name, whoever wrote the file. Import it only if you would run it:"
            " --live-work. Nothing was imported")
