"""One task that renews the leases of all of a worker's running jobs, in one transaction a look.

Each running job has `renew_at` (trio time): lease/2 after its handler started,
then lease/2 after its previous renewal committed; `math.inf` while a renewal is
in flight or once the job settled. The keeper sleeps until the earliest
`renew_at`, then renews every job due by then in ONE transaction
(`renew_leases`): one read of what their streams gained since the states the
previous renewal left (`JobSession.know`: an agent job appends
`job.tokens_added` every turn, so only those tails are folded, never the whole
streams), one decision and one appended `job.lease_renewed` per job, one commit. Ten thousand jobs in flight
cost one transaction per look, not ten thousand (decision 0025). A job that runs
for less than lease/2 (most of them) costs the keeper nothing at all.

Each look walks every running job, so the keeper looks at most `LOOKS` times per
interval: a job due within interval/LOOKS of a look is renewed at that look (a
little early, never late). It never needs waking: a `renew_at` set at time t is
t + lease/2, never earlier than the keeper's next look, which is at most lease/2
after its last one.

The batch runs in a task of its own, so the keeper goes on looking while it
commits, in a transaction of its own that the store's writer commits before the
group commit filling up (`transact_urgent`: it waits for the commit in progress,
not behind every job's next write); the batch's wait for its commit is shielded (a renewal the log took is
a renewal its job learns of). A job whose renewal was refused (its token no
longer holds it) goes to `refused(run)`, one at a time, which re-checks and
aborts the job if the lease is really lost. A batch that failed as a whole (the
database busy or gone) tells nothing about any job: each is due again at the
next look, and if the database stays unreachable the leases lapse and the stall
sweep of whoever can still write decides.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import trio

from gormes.actors.jobs import rules
from gormes.actors.jobs.session import JobSession
from gormes.actors.jobs.state import InvalidTransition, JobNotFound, JobState, LockLost
from gormes.errors import GormesError
from gormes.events.store import EventStore

__all__ = ["LOOKS", "LeasedRun", "keep_leases", "renew_leases", "renew_leases_in", "renewal_warning"]

LOOKS = 8  # the most looks over all running jobs per renewal interval
# About what one machine's log records of `job.lease_renewed` a second next to the
# jobs' own work (10,000 jobs at a 2 s lease, 10,000/s, lost leases; decision 0025).
RENEWALS_PER_S_WARN = 2_000


def renewal_warning(concurrency: int, lease_ms: int) -> str | None:
    """A warning when `concurrency` jobs in flight at `lease_ms` need more renewals
    a second than RENEWALS_PER_S_WARN (each renewed every lease/2), else None."""
    per_s = concurrency * 2 * 1000 / lease_ms
    if per_s <= RENEWALS_PER_S_WARN:
        return None
    return (f"gormes: warning: --concurrency {concurrency} at --lease {lease_ms} ms needs {per_s:,.0f} lease renewals/s "
            f"(one a job every lease/2); above ~{RENEWALS_PER_S_WARN:,}/s leases may lapse: a longer --lease needs fewer")


class LeasedRun(Protocol):
    renew_at: float
    renewals_stopped: bool  # set when the job settles: no renewal from then on
    lease_id: str  # the job's id
    lease_token: str  # the lock token the worker holds it with
    lease_state: JobState | None  # the job as the last renewal left it (spares a read)
    renewal: trio.CancelScope | None  # a refused renewal's re-check, cancelled when it settles


def renew_leases_in(
    s: JobSession, leases: Sequence[tuple[str, str]], lease_ms: int,
    known: Sequence[JobState] = (),
) -> list[JobState | None]:
    """Renew each (job id, token) of `leases` inside session `s`: the job's state
    after its renewal, or None where the token no longer holds the job (nothing
    is written for it). `known`: states of earlier renewals, used where the
    job's stream has not moved since."""
    s.know(known)
    s.preload([job_id for job_id, _ in leases])
    out: list[JobState | None] = []
    for job_id, token in leases:
        try:
            s.run(job_id, rules.Renew(now=s.now, token=token, lease_ms=lease_ms))
        except (LockLost, InvalidTransition, JobNotFound):
            out.append(None)
        else:
            out.append(s.state(job_id))
    return out


async def renew_leases(
    store: EventStore, now_ms: Callable[[], int], leases: Sequence[tuple[str, str]], lease_ms: int,
    known: Sequence[JobState] = (),
) -> list[JobState | None]:
    """`renew_leases_in` in one transaction of its own, committed durably ahead of
    the group commit filling up (`transact_urgent`, where the store has it)."""
    transact = getattr(store, "transact_urgent", None) or store.transact
    return await transact(  # type: ignore[no-any-return]
        lambda tx: renew_leases_in(JobSession(tx, now_ms()), leases, lease_ms, known)
    )


RenewMany = Callable[[Sequence[LeasedRun]], Awaitable[Sequence[JobState | None] | None]]


async def keep_leases(
    runs: Mapping[Any, LeasedRun],
    interval_s: float,
    renew_many: RenewMany,
    refused: Callable[[LeasedRun], Awaitable[bool]],
    *,
    log: Callable[[str], None] = lambda _: None,
) -> None:
    """Forever: renew the runs of `runs` that are due, all of them in one call of
    `renew_many(due)`, which answers each run's state after its renewal, None for
    a run whose renewal was refused (handed to `refused(run)`, True if it kept
    the lease after all), or None as a whole when it could not tell (each run is
    then due again at once: the keeper is woken)."""
    wake = trio.Event()

    async def recheck(run: LeasedRun) -> None:
        with trio.CancelScope() as run.renewal:
            if await refused(run) and not run.renewals_stopped:
                run.renew_at = trio.current_time() + interval_s
        run.renewal = None

    async def renew_batch(due: list[LeasedRun]) -> None:
        try:
            with trio.CancelScope(shield=True):
                kept = await renew_many(due)
        except GormesError as exc:
            log(f"lease renewal of {len(due)} job(s) failed: {exc}")
            kept = None
        now = trio.current_time()
        for i, run in enumerate(due):
            if run.renewals_stopped:
                continue
            if kept is None:
                run.renew_at = now  # again at the next look, which is now
                wake.set()
                continue
            state = kept[i]
            if state is not None:
                run.lease_state = state
                run.renew_at = now + interval_s
            else:
                renewals.start_soon(recheck, run)

    slack = interval_s / LOOKS
    async with trio.open_nursery() as renewals:
        while True:
            now = trio.current_time()
            next_look = now + interval_s
            due_by = now + slack
            due: list[LeasedRun] = []
            for run in list(runs.values()):
                if run.renew_at <= due_by and not run.renewals_stopped:
                    run.renew_at = math.inf
                    due.append(run)
                elif run.renew_at < next_look:
                    next_look = run.renew_at
            if due:
                renewals.start_soon(renew_batch, due)
            with trio.move_on_at(next_look):
                await wake.wait()
            wake = trio.Event()
            await trio.sleep_until(now + slack)  # woken or not: at most LOOKS looks an interval
