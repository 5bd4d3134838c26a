"""The scripted provider's shared timer sleeps like `trio.sleep`: each sleeper wakes at
its own time, in order, cancellably, with one timer task for them all."""

from __future__ import annotations

import trio
import trio.testing
from timer_tasks import timer_tasks

from gormes.providers import timer


async def test_sleepers_wake_at_their_own_times_whatever_order_they_started_in(autojump_clock):
    start = trio.current_time()
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await timer.sleep(seconds)
        woke.append((name, trio.current_time() - start))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleeper, "late", 3.0)
        await trio.testing.wait_all_tasks_blocked()  # the timer waits for 3 s now
        nursery.start_soon(sleeper, "early", 1.0)  # earlier: the timer must wake sooner
        nursery.start_soon(sleeper, "middle", 2.0)
    assert woke == [("early", 1.0), ("middle", 2.0), ("late", 3.0)]


async def test_many_sleepers_due_together_share_one_timer_task(autojump_clock):
    woke = 0

    async def sleeper() -> None:
        nonlocal woke
        await timer.sleep(1.0)
        woke += 1

    async with trio.open_nursery() as nursery:
        for _ in range(500):
            nursery.start_soon(sleeper)
        await trio.testing.wait_all_tasks_blocked()
        assert timer_tasks() == 1
    assert woke == 500
    assert trio.current_time() == 1.0


async def test_a_cancelled_sleeper_stops_at_once_and_the_others_sleep_on(autojump_clock):
    woke: list[str] = []
    doomed = trio.CancelScope()

    async def sleeper() -> None:
        await timer.sleep(5.0)
        woke.append("kept at %g" % trio.current_time())

    async def cancelled() -> None:
        with doomed:
            await timer.sleep(5.0)
        woke.append("cancelled at %g" % trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleeper)
        nursery.start_soon(cancelled)
        await trio.sleep(1.0)
        doomed.cancel()
    assert woke == ["cancelled at 1", "kept at 5"]


async def test_the_timer_idles_when_no_one_sleeps_and_wakes_for_the_next(autojump_clock):
    await timer.sleep(1.0)
    await trio.sleep(10.0)  # nobody on the timer meanwhile
    await timer.sleep(2.0)
    assert trio.current_time() == 13.0


async def test_no_time_or_a_negative_time_is_a_checkpoint_only(autojump_clock):
    with trio.CancelScope() as scope:
        scope.cancel()
        await timer.sleep(0)  # a checkpoint: the pending cancel is delivered
        raise AssertionError("not reached")
    await timer.sleep(-1)
    assert trio.current_time() == 0.0

