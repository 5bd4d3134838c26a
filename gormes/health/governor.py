"""workers.governor: each live worker's concurrency limit, and why it is what it is.

A worker's heartbeat carries its governor's report (gormes/actors/jobs/governor.py,
`Governor.report`): limit, floor, ceiling, whose CPU it reads, the last load
sample, the last decision's reason and the recent limit changes and breaker
trips. A limit below the ceiling is a warning that names the reason and, when the
governor reads the whole machine's CPU, how to read the worker's own instead (on
a shared box other tenants' load throttles it: issue 19, item 9).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from gormes.health import Verdict, listing, ok, warn


class GovernorChange(msgspec.Struct, frozen=True):
    at: float
    limit: int
    previous: int
    breaker: bool = False
    reason: str = ""


class GovernorState(msgspec.Struct, frozen=True):
    """A worker's `governor` heartbeat entry (older workers report only the first five)."""

    limit: int
    floor: int
    ceiling: int
    cpu_percent: float | None = None
    memory_percent: float | None = None
    cpu: str | None = None  # "process" or "machine"; None: a worker from before the choice
    reason: str | None = None
    recent: list[GovernorChange] = []


def _load(state: GovernorState) -> str:
    if state.cpu_percent is None or state.memory_percent is None:
        return ""
    return f" (cpu {state.cpu_percent:.0f}%, memory {state.memory_percent:.0f}%)"


def describe(worker_id: str, state: GovernorState) -> str:
    """`w1 at 4 of 8 (cpu 99%, memory 50%): cpu 99% (process) above 90%: halved 8 -> 4`."""
    line = f"{worker_id} at {state.limit} of {state.ceiling}{_load(state)}"
    return line + (f": {state.reason}" if state.reason else "")


def check_governors(live: Sequence[tuple[str, GovernorState | None]]) -> Verdict:
    """The verdict over the live workers (id, governor report or None: no governor)."""
    if not live:
        return ok("no live worker, so no governor to report on")
    governed = [(w, g) for w, g in live if g is not None]
    throttled = [(w, g) for w, g in governed if g.limit < g.ceiling]
    if throttled:
        remedy = ("the load is high: jobs run slower until it drops; add capacity, lower other load, "
                  "or set the thresholds (gormes worker --cpu-high/--memory-high, the daemon's "
                  "[governor_policy] table)")
        if any(g.cpu == "machine" for _, g in throttled):
            remedy += ("; on a shared box, read this worker's own CPU instead of the machine's "
                       "(--governor-cpu process, or cpu = \"process\" in [governor_policy])")
        return warn(
            f"the governor has lowered concurrency for load on {len(throttled)} worker(s): "
            + listing([describe(w, g) for w, g in throttled], limit=3),
            remedy,
        )
    ungoverned = len(live) - len(governed)
    why = listing([describe(w, g) for w, g in governed if g.reason], limit=3)
    return ok(
        f"{len(governed)} governed worker(s) at full concurrency"
        + (f"; {ungoverned} run without a governor" if ungoverned else "")
        + (f": {why}" if why else "")
    )
