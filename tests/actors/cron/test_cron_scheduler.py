"""The cron scheduler on a real database: exactly once across restarts, with two
schedulers racing on one file, and in spite of the queue freeing a key."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import trio

from gormes.actors.cron.scheduler import CronBook, CronScheduler
from gormes.actors.jobs.queue import JobQueue
from gormes.events.cron import CronFired, cron_stream
from gormes.events.sqlite import SQLiteEventStore


class Clock:
    """A wall clock the test moves by hand (seconds since the epoch)."""

    def __init__(self, iso: str) -> None:
        self.now = _seconds(iso)

    def set(self, iso: str) -> None:
        self.now = _seconds(iso)

    def __call__(self) -> float:
        return self.now


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp()


async def fires(store: SQLiteEventStore, name: str) -> list[CronFired]:
    return [r.event for r in await store.read_stream(cron_stream(name)) if isinstance(r.event, CronFired)]


async def jobs_named(queue: JobQueue, name: str) -> list:
    return await queue.list(name=name, limit=1000)


async def test_a_due_fire_is_enqueued_once_also_across_a_restart(db_path: Path):
    clock = Clock("2024-03-01T10:00:30")
    async with SQLiteEventStore.open(db_path) as store:
        queue = await JobQueue.open(store, clock=clock)
        await CronBook(store, clock=clock).add("tick", "* * * * *", "echo", {"n": 1})
        scheduler = CronScheduler(queue, clock=clock)
        assert await scheduler.tick() == []  # 10:00 was before the schedule existed
        clock.set("2024-03-01T10:01:00")
        (fired,) = await scheduler.tick()
        assert await scheduler.tick() == []
        (job,) = await jobs_named(queue, "echo")
        assert job.id == fired.job_id and job.data == {"n": 1}
        assert job.options.idempotency_key == "cron:tick:2024-03-01T10:01:00Z"

    # The daemon restarts within the same minute: the fire is not repeated.
    async with SQLiteEventStore.open(db_path) as store:
        queue = await JobQueue.open(store, clock=clock)
        scheduler = CronScheduler(queue, clock=clock)
        assert await scheduler.tick() == []
        clock.set("2024-03-01T10:02:05")
        (second,) = await scheduler.tick()
        assert second.fire_at == int(_seconds("2024-03-01T10:02:00") * 1000)
        assert len(await jobs_named(queue, "echo")) == 2
        assert [f.fire_at for f in await fires(store, "tick")] == [
            int(_seconds("2024-03-01T10:01:00") * 1000), second.fire_at,
        ]


async def test_a_cancelled_fire_is_not_fired_again_when_its_key_is_freed(store):
    clock = Clock("2024-03-01T10:00:30")
    queue = await JobQueue.open(store, clock=clock)
    await CronBook(store, clock=clock).add("tick", "* * * * *", "echo")
    clock.set("2024-03-01T10:01:10")
    (fired,) = await CronScheduler(queue, clock=clock).tick()
    await queue.cancel(fired.job_id)  # the queue frees the idempotency key
    # a fresh scheduler (a restart) in the same minute
    assert await CronScheduler(queue, clock=clock).tick() == []
    assert len(await jobs_named(queue, "echo")) == 1


async def test_missed_fires_while_down_fire_once_for_the_latest(store):
    clock = Clock("2024-03-01T10:00:30")
    queue = await JobQueue.open(store, clock=clock)
    await CronBook(store, clock=clock).add("tidy", "*/5 * * * *", "echo")
    clock.set("2024-03-01T11:02:00")  # down from before 10:05 until after 11:00
    (fired,) = await CronScheduler(queue, clock=clock).tick()
    assert fired.fire_at == int(_seconds("2024-03-01T11:00:00") * 1000)
    assert len(await jobs_named(queue, "echo")) == 1


async def test_paused_schedules_do_not_fire_and_resume_skips_what_fell_due(store):
    clock = Clock("2024-03-01T10:00:30")
    queue = await JobQueue.open(store, clock=clock)
    book = CronBook(store, clock=clock)
    await book.add("tick", "* * * * *", "echo", queue="cron")
    scheduler = CronScheduler(queue, clock=clock)
    await book.pause("tick")
    clock.set("2024-03-01T10:03:00")
    assert await scheduler.tick() == []
    clock.set("2024-03-01T10:03:20")
    await book.resume("tick")
    assert await scheduler.tick() == []
    clock.set("2024-03-01T10:04:00")
    (fired,) = await scheduler.tick()
    (job,) = await jobs_named(queue, "echo")
    assert job.queue == "cron" and job.id == fired.job_id


async def test_removed_schedules_do_not_fire(store):
    clock = Clock("2024-03-01T10:00:30")
    queue = await JobQueue.open(store, clock=clock)
    book = CronBook(store, clock=clock)
    await book.add("tick", "* * * * *", "echo")
    await book.remove("tick")
    clock.set("2024-03-01T10:05:00")
    assert await CronScheduler(queue, clock=clock).tick() == []
    assert await jobs_named(queue, "echo") == []


async def test_a_fire_is_audited_with_trust_class_system(store):
    clock = Clock("2024-03-01T10:00:30")
    queue = await JobQueue.open(store, clock=clock)
    await CronBook(store, clock=clock).add("tick", "* * * * *", "echo")
    clock.set("2024-03-01T10:01:00")
    (fired,) = await CronScheduler(queue, clock=clock).tick()
    audits = [r.event for r in await store.read_all(types=["audit.operation"])]
    assert [(a.operation, a.trust, a.caller, a.job_id) for a in audits] == [
        ("job.submit", "system", "cron:tick", fired.job_id)
    ]


async def test_two_schedulers_on_one_database_fire_each_time_once(db_path: Path):
    clock = Clock("2024-03-01T10:00:30")
    async with SQLiteEventStore.open(db_path) as setup:
        await JobQueue.open(setup)
        await CronBook(setup, clock=clock).add("tick", "* * * * *", "echo")
    async with SQLiteEventStore.open(db_path) as one, SQLiteEventStore.open(db_path) as two:
        first = CronScheduler(await JobQueue.open(one, clock=clock), clock=clock, scheduler_id="a")
        second = CronScheduler(await JobQueue.open(two, clock=clock), clock=clock, scheduler_id="b")
        results: list = []
        for minute in range(1, 9):
            clock.set(f"2024-03-01T10:0{minute}:00")

            async def tick(scheduler: CronScheduler) -> None:
                results.extend(await scheduler.tick())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(tick, first)
                nursery.start_soon(tick, second)
        assert len(results) == 8
        assert len({r.fire_at for r in results}) == 8
        recorded = await fires(one, "tick")
        assert len(recorded) == 8
        assert len(await jobs_named(first.queue, "echo")) == 8


async def test_the_run_loop_fires_when_the_time_comes(store):
    # A clock 0.2 s before a minute boundary: the loop must sleep, then fire.
    start = _seconds("2024-03-01T10:00:59.800")
    base = trio.current_time()

    def clock() -> float:
        return start + (trio.current_time() - base)

    queue = await JobQueue.open(store)
    await CronBook(store, clock=clock).add("tick", "* * * * *", "echo")
    scheduler = CronScheduler(queue, clock=clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(10):
            async for record in store.subscribe(types=["cron.fired"]):
                assert record.event.fire_at == int(_seconds("2024-03-01T10:01:00") * 1000)
                break
            # The commit wakes this subscriber before the scheduler's own task resumes
            # from it to count the fire.
            while scheduler.fired == 0:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert scheduler.fired == 1
