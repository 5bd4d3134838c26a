"""The cyclic garbage collector's youngest generation, widened with the runs in flight.

Each step of a run allocates objects that live until its event is durable: one
group commit, during which every other run in flight takes its own step. With
Python's default thresholds (700, 10, 10) an object that lives longer than
7,000 allocations reaches the oldest generation, and only a full collection,
which walks every object of the process, frees that generation's space in the
count. With a hundred runs in flight most of a step's objects die before that;
with ten thousand, nearly all of them live past it, full collections come dozens
of times as often, and each walks ten thousand runs' state: measured, 40% of the
time of 10,000 concurrent agent runs (decision 0025).

So, while runs are in flight, the youngest threshold is raised to `WINDOW_PER_RUN`
allocations per run in flight (decision 0044). The count it is compared with is
allocations less deallocations, and nearly everything a step allocates is freed
by reference counting when its event is durable (10,000 runs of 11 steps leave a
few thousand objects of cyclic garbage in all), so at that threshold a young
collection is rare while the runs run, and the step objects alive at a moment are
not walked again and again, nor promoted for the middle and oldest generations to
walk. What waits longer to be freed is cyclic garbage: at most `WINDOW_PER_RUN`
objects of it per run in flight. The threshold changes at powers of two of the
number of runs, and goes back to what it was as they end; while some still run, it
narrows no lower than the young generation's count plus the narrower window, since
a collection at that moment would walk every run left. Thresholds someone else
set are the base it widens (the worker sets its own, gormes/cli/worker.py), and
so are thresholds someone sets while they are widened; with the collector
disabled or a youngest threshold of 0 nothing is changed.
"""

from __future__ import annotations

import gc

__all__ = ["WINDOW_PER_RUN", "in_flight", "run_ended", "run_started"]

WINDOW_PER_RUN = 100  # net allocations between young collections, per run in flight

_live = 0
_level = 0  # `_live.bit_length()` when the thresholds were last looked at
_base: tuple[int, int, int] | None = None  # the thresholds before they were widened
_ours: tuple[int, int, int] | None = None  # the thresholds set here, while widened


def in_flight() -> int:
    """Runs in flight in this process (every RunManager's), each from the start of
    its start (before its `run.started` is written) to its end."""
    return _live


def run_started() -> None:
    global _live
    _live += 1
    if _live.bit_length() != _level:
        _adjust()


def run_ended() -> None:
    global _live
    _live -= 1
    if _live.bit_length() != _level:
        _adjust()


def wanted(base: tuple[int, int, int], runs: int) -> tuple[int, int, int]:
    """The thresholds for `runs` in flight (a power of two), widened from `base`."""
    young, middle, old = base
    if young <= 0:
        return base
    return (max(young, WINDOW_PER_RUN * runs), middle, old)


def _adjust() -> None:
    global _level, _base, _ours
    _level = _live.bit_length()
    current = gc.get_threshold()
    if _ours is not None and current != _ours:  # set by someone else meanwhile: the new base
        _base = _ours = None
    base = current if _base is None else _base
    target = wanted(base, 1 << _level) if _live and gc.isenabled() else base
    if _live and target[0] < current[0]:
        # Fewer runs, but those left are still running: the young generation may hold
        # more than the narrower threshold, and collecting it now would walk all their
        # steps (measured: 0.5 s at 8,191 runs). Their next `target` allocations first.
        target = (min(current[0], gc.get_count()[0] + target[0]), *target[1:])
    if target == current:
        return
    gc.set_threshold(*target)
    if target == base:
        _base = _ours = None
    else:
        _base, _ours = base, target
