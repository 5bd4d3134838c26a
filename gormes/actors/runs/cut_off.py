"""Recording the end of runs whose writer is gone.

A run records its own end. When the process driving it dies (SIGKILL, a power
cut, a lease its worker lost without learning of it), the run and its subagents
stop with no end event, and would read as `running` for ever (`gormes runs list`,
the `runs` projection). Whoever knows better records `run.cancelled` on the run
and on each of its descendants left with no end, saying why (`end_cut_off_runs`):
an agent job's next attempt (gormes/actors/agent_jobs/cut_off.py), the operator's
resume (`resume.py`), and the daemon's sweep of runs outside a job whose process
on this host is gone (`GoneProcessRuns`).

Each end is appended at the version of the stream as it was read: a run that is in
fact still being written at that moment makes the append conflict, and that run
and its subagents are left alone. A process that was only frozen (SIGSTOP, a
paused VM) and wakes up finds this end and records no second one
(`RunManager._finish`), though an observation that was under way when it froze
may still land after it.
"""

from __future__ import annotations

from typing import Any

from gormes.actors.runs.process import (
    OPEN_STATUSES, gone_reason, process_state, recorded_processes, this_process,
)
from gormes.errors import ConcurrencyError
from gormes.events.jobs import Tokens
from gormes.events.runs import TERMINAL_TYPES, RunCancelled, RunChildSpawned, run_stream, tokens_of
from gormes.events.store import EventStore
from gormes.projections.bookkeeping import has_table


async def end_cut_off_runs(store: EventStore, run_id: str, reason: str) -> list[str]:
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


class GoneProcessRuns:
    """The daemon's sweep: runs outside a job (`gormes run`, `fork`, `runs resume`,
    `RunManager` in a script) that have no end and whose process, on this host, is
    gone (killed: nothing could record their end) are recorded as cut off, with
    their subagents. It reads the `runs` projection, which the daemon keeps current;
    a process that cannot be checked from here (another host or container) is left
    to the operator (`gormes runs resume RUN --force`)."""

    def __init__(self, store: EventStore) -> None:
        self._store = store

    async def sweep(self) -> list[str]:
        """The runs it recorded as cut off."""
        here = this_process()

        def candidates(conn: Any) -> dict[str, Any]:
            if not has_table(conn, "runs"):
                return {}
            ids = [row[0] for row in conn.execute(
                f"SELECT run_id FROM runs WHERE status IN ({', '.join('?' * len(OPEN_STATUSES))})"
                " AND job_id IS NULL AND parent_run_id IS NULL AND host = ?",
                (*OPEN_STATUSES, here.host),
            ).fetchall()]
            return recorded_processes(conn, ids)

        ended: list[str] = []
        for run_id, process in (await self._store.read_sql(candidates)).items():
            if process is not None and process_state(process, here) == "gone":
                ended += await end_cut_off_runs(self._store, run_id, gone_reason(process))
        return ended
