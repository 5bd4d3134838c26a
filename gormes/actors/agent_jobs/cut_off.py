"""Ending the runs of an agent job's attempt that was lost.

When the worker running an attempt dies (SIGKILL, a power cut, a lease it lost
without learning of it), the run and its subagents stop with no end event. The
job's next attempt knows better: it holds the job's lease now, so the earlier
attempt is over. Before it continues (or restarts) the earlier run, it records
`run.cancelled` on that run and on each of its descendants left with no end,
saying why (`cut_off_reason`, with gormes/actors/runs/cut_off.py's
`end_cut_off_runs`).

An agent job can also END while no attempt runs it: cancelled while waiting for
its next attempt, or while its worker was dead; dead after its last stall. No
next attempt comes then, so workers sweep for such jobs (`EndedJobRuns`, handed
to each worker with the `agent` handler: install.py): once an ended job has been
over for longer than a live worker takes to end its runs itself, its last
attempt's runs left with no end are recorded as cut off.
"""

from __future__ import annotations

from gormes.actors.agent_jobs.attempts import last_attempt_run
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.runs.cut_off import end_cut_off_runs
from gormes.events.jobs import job_stream
from gormes.projections.ledger import status_in

# How a job ends while no attempt runs it: cancelled between attempts or while
# its worker was dead, dead after its last stall. (A job that completes or fails
# does so in an attempt, whose worker records its run's end.)
_ENDED_UNRUN = status_in({"cancelled", "dead"})


def cut_off_reason(job_id: str) -> str:
    return f"cut off: the worker running job {job_id}'s attempt was lost; the job's next attempt took over"


def ended_job_reason(job_id: str, status: str) -> str:
    return f"cut off: job {job_id} ended ({status}) while no attempt was running it"


class EndedJobRuns:
    """A worker's sweep: the runs of agent jobs that ended `dead` or `cancelled`
    more than `grace_ms` ago (time enough for a live worker to record its runs'
    ends itself) and within `window_ms` before the first sweep, whose last
    attempt's runs have no end, are recorded as cut off. Each sweep takes up to
    `limit` jobs, in the order they ended, from where the last one stopped."""

    def __init__(self, queue: JobQueue, *, grace_ms: int, window_ms: int = 24 * 3600 * 1000,
                 limit: int = 100) -> None:
        self._queue = queue
        self._grace_ms = grace_ms
        self._window_ms = window_ms
        self._limit = limit
        self._after: tuple[int, str] | None = None  # (finished_at, id) of the last job seen

    async def sweep(self) -> list[str]:
        """The runs it recorded as cut off."""
        store = self._queue.store
        now = self._queue.now_ms()
        until = now - self._grace_ms
        after = self._after or (now - self._window_ms, "")
        rows = await store.read_sql(lambda conn: conn.execute(
            "SELECT id, status, finished_at FROM jobs WHERE name = 'agent' "
            f"AND {_ENDED_UNRUN} AND finished_at <= ? "
            "AND (finished_at > ? OR (finished_at = ? AND id > ?)) "
            "ORDER BY finished_at, id LIMIT ?",
            (until, after[0], after[0], after[1], self._limit),
        ).fetchall())
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
