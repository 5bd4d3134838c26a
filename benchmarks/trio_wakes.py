"""What a wake costs trio itself as the number of parked tasks grows (no gormes code).

    .venv/bin/python benchmarks/trio_wakes.py           # one JSON line on stdout
    .venv/bin/python benchmarks/trio_wakes.py --quick   # a smoke test (small N)

A run's step in gormes ends with its task parked on a group commit and woken when
the batch is durable (`_Batch.set`: up to 1,024 tasks rescheduled at once, each
resuming its whole chain of coroutine frames, about nine on average). This
benchmark does only that: N tasks, each a chain of DEPTH coroutine frames, park
with `wait_task_rescheduled`; a waker task reschedules them 1,024 at a time, and
each task parks again, 11 times in all. The figure is the process's CPU per wake
from the moment all N have parked once until each has been woken 10 times and has
parked again (the 11th wake, which ends the task, is not timed), the median of
rounds that wake at least 20,000 tasks in all. It is measured with the cyclic
collector off (what stays is, most likely, that the CPU caches no longer hold N
tasks' frames) and with Python's default thresholds (what decision 0044's collector
removes from gormes).

The comparator is the same wake at 100 tasks in the same run; `ratio` is the CPU
a wake costs at N over that (decision 0047: the growth of a gormes step from 100
to 10,000 concurrent runs).
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio
from outcome import Value
from trio.lowlevel import Abort, Task, current_task, reschedule, wait_task_rescheduled

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import progress, report  # noqa: E402

WAKES_PER_TASK = 11  # a benchmark run's recorded steps (benchmarks/concurrency.py)
BATCH = 1024  # the group commit's cap (gormes/events/store_base.py MAX_BATCH)
MIN_WAKES = 20_000  # per configuration, over its rounds
FULL_N, QUICK_N = (100, 1_000, 10_000), (10, 200)
DEPTHS = (1, 10)


async def _round(n: int, depth: int) -> float:
    """CPU seconds per wake, from the moment all `n` tasks have parked for the first
    time until each has been woken `WAKES_PER_TASK - 1` times and parked again."""
    parked: list[Task] = []  # waiting for a timed wake
    last: list[Task] = []  # parked for the last time: woken once the clock stops

    async def frame(level: int, lap: int) -> None:
        if level == 0:
            (last if lap == WAKES_PER_TASK - 1 else parked).append(current_task())
            await wait_task_rescheduled(lambda _: Abort.SUCCEEDED)
        else:
            await frame(level - 1, lap)

    async def task() -> None:
        for lap in range(WAKES_PER_TASK):
            await frame(depth - 1, lap)

    async def wake(tasks: list[Task]) -> None:
        for t in tasks:
            reschedule(t, Value(None))
        await trio.sleep(0)

    spent: list[float] = []

    async def waker() -> None:
        while len(parked) < n:
            await trio.sleep(0)
        start = time.process_time()
        while len(last) < n:
            batch = parked[:BATCH]
            del parked[:BATCH]
            await wake(batch)
        spent.append(time.process_time() - start)
        await wake(last)

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(task)
        nursery.start_soon(waker)
    return spent[0] / (n * (WAKES_PER_TASK - 1))


def _wake_us(n: int, depth: int, collector: bool) -> float:
    (gc.enable if collector else gc.disable)()
    try:
        trio.run(_round, n, depth)  # warm-up
        rounds = max(3, -(-MIN_WAKES // (n * (WAKES_PER_TASK - 1))))
        return statistics.median(trio.run(_round, n, depth) for _ in range(rounds)) * 1e6
    finally:
        gc.enable()


def main(argv: list[str]) -> None:
    sizes = QUICK_N if "--quick" in argv else FULL_N
    cases: list[dict[str, Any]] = []
    for collector in (False, True):
        for depth in DEPTHS:
            base = None
            for n in sizes:
                us = _wake_us(n, depth, collector)
                base = base if base is not None else us
                cases.append({
                    "tasks": n, "depth": depth, "collector": collector,
                    "us_per_wake": round(us, 2), "ratio": round(us / base, 3),
                })
                progress(f"trio_wakes: {cases[-1]}")
    largest = max(sizes)
    report({
        "cases": cases,
        "comparator_tasks": sizes[0],
        "ratio_largest": {
            f"depth {c['depth']}, collector {'on' if c['collector'] else 'off'}": c["ratio"]
            for c in cases if c["tasks"] == largest
        },
    })


if __name__ == "__main__":
    main(sys.argv[1:])
