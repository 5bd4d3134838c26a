"""Ending the runs of an agent job's attempt that was lost.

A run records its own end. When the worker running an attempt dies (SIGKILL, a
power cut, a lease it lost without learning of it), the run and its subagents stop
with no end event, and would read as `running` for ever (`gormes runs list`, the
`runs` projection). The job's next attempt knows better: it holds the job's lease
now, so the earlier attempt is over. Before it continues (or restarts) the earlier
run, it records `run.cancelled` on that run and on each of its descendants left
with no end, saying why.

Each end is appended at the version of the stream as it was read: a run that is in
fact still being written at that moment makes the append conflict, and that run
and its subagents are left alone. A worker that was only frozen (SIGSTOP, a paused
VM) and wakes up finds its lease lost and aborts the handler; the run then sees
this end and records no second one (`RunManager._finish`), though an observation
that was under way when it froze may still land after it.
"""

from __future__ import annotations

from typing import Any

from gormes.errors import ConcurrencyError
from gormes.events.jobs import Tokens
from gormes.events.runs import TERMINAL_TYPES, RunCancelled, RunChildSpawned, run_stream, tokens_of


def cut_off_reason(job_id: str) -> str:
    return f"cut off: the worker running job {job_id}'s attempt was lost; the job's next attempt took over"


async def end_cut_off_runs(store: Any, run_id: str, reason: str) -> list[str]:
    """Record `run.cancelled` (with `reason`) on `run_id` and its descendants, each
    only if its stream has no end; returns the runs ended, parents first."""
    ended: list[str] = []
    pending = [run_id]
    while pending:
        current = pending.pop(0)
        records = await store.read_stream(run_stream(current))
        if not records or any(isinstance(r.event, TERMINAL_TYPES) for r in records):
            continue
        tokens = sum((tokens_of(r.event) for r in records), Tokens())
        try:
            await store.append(run_stream(current), [RunCancelled(reason=reason, tokens=tokens)],
                               expected_version=records[-1].version)
        except ConcurrencyError:
            continue  # still being written: not cut off after all
        ended.append(current)
        pending.extend(r.event.child_run_id for r in records if isinstance(r.event, RunChildSpawned))
    return ended
