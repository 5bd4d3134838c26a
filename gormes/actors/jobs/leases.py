"""One task that renews the leases of all of a worker's running jobs.

Each running job has `renew_at` (trio time): lease/2 after its handler started,
then lease/2 after its previous renewal finished, as a loop of its own per job
would; `math.inf` while a renewal is in flight or once the job settled. The
keeper sleeps until the earliest `renew_at` and starts that job's renewal in a
task of its own, so a slow renewal delays no other job, and a job that runs for
less than lease/2 (most of them) costs the keeper nothing at all.

It never needs waking: a `renew_at` set at time t is t + lease/2, never earlier
than the keeper's next look, which is at most lease/2 after its last one.

Each look walks every running job, so the keeper looks at most `LOOKS` times
per interval: a job due within interval/LOOKS of a look is renewed at that look
(a little early, never late). Waking at each job's own `renew_at` instead would
walk ten thousand jobs ten thousand times per interval (decision 0025).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import trio

LOOKS = 8  # the most looks over all running jobs per renewal interval


class LeasedRun(Protocol):
    renew_at: float
    renewals_stopped: bool  # set when the job settles: no renewal from then on
    renewal: trio.CancelScope | None  # the renewal in flight, cancelled when it settles


async def keep_leases(
    runs: Mapping[Any, LeasedRun],
    interval_s: float,
    renew: Callable[[LeasedRun], Awaitable[bool]],
) -> None:
    """Forever: renew each run in `runs` when due. `renew(run)` returns True while
    the lease is kept (the run is then due again `interval_s` later)."""

    async def renew_one(run: LeasedRun) -> None:
        if run.renewals_stopped:
            return
        with trio.CancelScope() as run.renewal:
            if await renew(run) and not run.renewals_stopped:
                run.renew_at = trio.current_time() + interval_s
        run.renewal = None

    slack = interval_s / LOOKS
    async with trio.open_nursery() as renewals:
        while True:
            now = trio.current_time()
            next_look = now + interval_s
            due = now + slack
            for run in list(runs.values()):
                if run.renew_at <= due and not run.renewals_stopped:
                    run.renew_at = math.inf
                    renewals.start_soon(renew_one, run)
                else:
                    next_look = min(next_look, run.renew_at)
            await trio.sleep_until(next_look)
