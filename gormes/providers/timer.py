"""Many tasks sleeping on one timer: the scripted provider's `delay_ms`.

`trio.sleep` gives each sleeper a cancel scope with a deadline, and ends the sleep
by cancelling that scope: a `Cancelled` raised and caught in the sleeper's task.
Ten thousand scripted runs waiting 1 s a turn spent about an eighth of their
process's CPU doing that (decision 0041), a cost of the stand-in model, not of the
runtime it stands in front of. Here each sleeper parks on a heap, and one system
task per trio run, sleeping until the earliest due time, wakes every sleeper due
at once: one scope and one expiry per wake-up, not per sleeper.

A sleeper that is cancelled leaves the heap (its entry is marked and skipped), so
`sleep` cancels like `trio.sleep`; it is a checkpoint either way.
"""

from __future__ import annotations

import heapq
import math
from itertools import count
from typing import Any

import trio
from outcome import Value
from trio.lowlevel import Abort, RunVar, Task, current_task, reschedule, wait_task_rescheduled


class _Sleeper:
    __slots__ = ("task",)

    def __init__(self, task: Task) -> None:
        self.task: Task | None = task

    def abort(self, _raise_cancel: Any) -> Abort:
        self.task = None  # skipped when it comes due
        return Abort.SUCCEEDED


class _Timer:
    def __init__(self) -> None:
        self.heap: list[tuple[float, int, _Sleeper]] = []
        self.order = count()  # ties in due time wake in arrival order
        self.scope = trio.CancelScope()
        self.idle: Task | None = None  # the timer's task, parked while the heap is empty

    def add(self, due: float, sleeper: _Sleeper) -> None:
        heapq.heappush(self.heap, (due, next(self.order), sleeper))
        if self.idle is not None:
            task, self.idle = self.idle, None
            reschedule(task, Value(None))
        elif due < self.scope.deadline:
            self.scope.deadline = due

    def _stop_idling(self, _raise_cancel: Any) -> Abort:
        self.idle = None
        return Abort.SUCCEEDED

    async def run(self) -> None:
        heap = self.heap
        while True:
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                task = heapq.heappop(heap)[2].task
                if task is not None:
                    reschedule(task, Value(None))
            if not heap:
                self.idle = current_task()
                await wait_task_rescheduled(self._stop_idling)
                continue
            self.scope = trio.CancelScope(deadline=heap[0][0])
            with self.scope:
                await trio.sleep_forever()


_timer: RunVar[_Timer] = RunVar("gormes_scripted_timer")


def _the_timer() -> _Timer:
    try:
        return _timer.get()
    except LookupError:
        timer = _Timer()
        _timer.set(timer)
        trio.lowlevel.spawn_system_task(timer.run, name="gormes scripted-delay timer")
        return timer


async def sleep(seconds: float) -> None:
    """`trio.sleep(seconds)`, the wake-up shared with every other sleeper of this run."""
    if seconds <= 0 or math.isnan(seconds):
        await trio.lowlevel.checkpoint()
        return
    sleeper = _Sleeper(current_task())
    _the_timer().add(trio.current_time() + seconds, sleeper)
    await wait_task_rescheduled(sleeper.abort)
