"""Ending the runs of an agent job's attempt that was lost.

A run records its own end. When the worker running an attempt dies (SIGKILL, a
power cut, a lease it lost without learning of it), the run and its subagents stop
with no end event, and would read as `running` for ever (`gormes runs list`, the
`runs` projection). The job's next attempt knows better: it holds the job's lease
now, so the earlier attempt is over. Before it continues (or restarts) the earlier
run, it records `run.cancelled` on that run and on each of its descendants left
with no end, saying why.

An agent job can also END while no attempt runs it: cancelled while waiting for
its next attempt, or while its worker was dead; dead after its last stall. No
next attempt comes then, so workers sweep for such jobs (`EndedJobRuns`): once
an ended job has been over for longer than a live worker takes to end its runs
itself, its last attempt's runs left with no end are recorded as cut off.

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
from gormes.events.jobs import Tokens, job_stream
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


def ended_job_reason(job_id: str, status: str) -> str:
    return f"cut off: job {job_id} ended ({status}) while no attempt was running it"


class EndedJobRuns:
    """A worker's sweep: the runs of agent jobs that ended `dead` or `cancelled`
    more than `grace_ms` ago (time enough for a live worker to record its runs'
    ends itself) and within `window_ms` before the first sweep, whose last
    attempt's runs have no end, are recorded as cut off. Each sweep takes up to
    `limit` jobs, in the order they ended, from where the last one stopped."""

    def __init__(self, queue: Any, *, grace_ms: int, window_ms: int = 24 * 3600 * 1000,
                 limit: int = 100) -> None:
        self._queue = queue
        self._grace_ms = grace_ms
        self._window_ms = window_ms
        self._limit = limit
        self._after: tuple[int, str] | None = None  # (finished_at, id) of the last job seen

    async def sweep(self) -> list[str]:
        """The runs it recorded as cut off."""
        from gormes.actors.agent_jobs.handler import last_attempt_run

        now = self._queue._now()
        until = now - self._grace_ms
        after = self._after or (now - self._window_ms, "")
        rows = await self._queue._read(lambda conn: conn.execute(
            "SELECT id, status, finished_at FROM jobs WHERE name = 'agent' "
            "AND status IN ('dead', 'cancelled') AND finished_at <= ? "
            "AND (finished_at > ? OR (finished_at = ? AND id > ?)) "
            "ORDER BY finished_at, id LIMIT ?",
            (until, after[0], after[0], after[1], self._limit),
        ).fetchall())
        store = self._queue.store
        ended: list[str] = []
        for job_id, status, _ in rows:
            run_id = last_attempt_run(await store.read_stream(job_stream(job_id)))
            if run_id is not None:
                ended += await end_cut_off_runs(store, run_id, ended_job_reason(job_id, status))
        if len(rows) == self._limit:
            self._after = (rows[-1][2], rows[-1][0])
        else:
            self._after = (until, "")
        return ended


class GoneProcessRuns:
    """The daemon's sweep: runs outside a job (`gormes run`, `fork`, `runs resume`,
    `RunManager` in a script) that have no end and whose process, on this host, is
    gone (killed: nothing could record their end) are recorded as cut off, with
    their subagents. It reads the `runs` projection, which the daemon keeps current;
    a process that cannot be checked from here (another host or container) is left
    to the operator (`gormes runs resume RUN --force`)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    async def sweep(self) -> list[str]:
        """The runs it recorded as cut off."""
        from gormes.actors.runs.process import gone_reason, process_state, recorded_processes, this_process
        from gormes.projections.bookkeeping import _has_table

        here = this_process()

        def candidates(conn: Any) -> dict[str, Any]:
            if not _has_table(conn, "runs"):
                return {}
            ids = [row[0] for row in conn.execute(
                "SELECT run_id FROM runs WHERE status IN ('running', 'suspended') AND job_id IS NULL "
                "AND parent_run_id IS NULL AND host = ?", (here.host,),
            ).fetchall()]
            return recorded_processes(conn, ids)

        ended: list[str] = []
        for run_id, process in (await self._store.read_sql(candidates)).items():
            if process is not None and process_state(process, here) == "gone":
                ended += await end_cut_off_runs(self._store, run_id, gone_reason(process))
        return ended
