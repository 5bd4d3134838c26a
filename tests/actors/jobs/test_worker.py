"""The job worker's rules, in-process, as given/when/then scenarios.

Time is trio's MockClock at rate 0: nothing moves unless a test jumps it, and the
queue reads the same clock, so leases, backoffs, timeouts and sweeps happen
exactly when the test says. Store I/O runs in threads; tests never sleep on real
time, they wait for the log to change (`wait_for_change`) until the job shows
the state they expect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from gormes.actors.jobs.governor import BREAKER_ERROR, Governor, GovernorPolicy, LoadSample, decide
from gormes.actors.jobs.handlers import (
    HandlerImportError, HandlerRegistry, UnrecoverableError, default_registry, import_handlers,
)
from gormes.actors.jobs.context import JobContext
from gormes.actors.jobs.queue import Job, JobQueue
from gormes.actors.jobs.worker import Worker, WorkerConfig
from gormes.events.sqlite import SQLiteEventStore

# Jumps of the clock stay well inside a lease, so renewals are never outrun by the
# stall sweep (a real clock does not leap seconds between two renewals).
LEASE_MS = 10_000
CONFIG = WorkerConfig(
    worker_id="w-test", concurrency=4, lease_ms=LEASE_MS, stall_interval_ms=500,
    stall_grace_ms=5_000, promote_interval_ms=100, timeout_sweep_interval_ms=1_000,
    unblock_interval_ms=500, heartbeat_interval_ms=5_000, abort_grace_ms=2_000,
    shutdown_grace_ms=3_000,
)


class Harness:
    """A store, a queue on the mock clock, and helpers to wait on the log."""

    def __init__(self, store: SQLiteEventStore, queue: JobQueue, clock: trio.testing.MockClock):
        self.store = store
        self.queue = queue
        self.clock = clock
        self.started: dict[str, trio.Event] = {}
        self.release: dict[str, trio.Event] = {}
        self.calls: list[tuple[str, int]] = []

    async def until(self, job_id: str, check: Callable[[Job], bool]) -> Job:
        """Wait (on log changes, not time) until the job satisfies `check`."""
        while True:
            seen = self.store.generation
            job = await self.queue.get(job_id)
            if job is not None and check(job):
                return job
            await self.store.wait_for_change(seen)

    async def jump(self, seconds: float) -> None:
        """Move the clock once every task has settled into its wait (so timers that
        are about to start are measured from now, not from after the jump).

        A task waiting on a store write in a thread counts as blocked, so first let
        every write already queued commit (a no-op transaction is a barrier: the
        writer commits in order) and the tasks that wrote settle again; otherwise a
        renewal caught mid-write would be stamped before the jump and scheduled after it.
        """
        await trio.testing.wait_all_tasks_blocked()
        await self.store.transact(lambda tx: None)
        await trio.testing.wait_all_tasks_blocked()
        self.clock.jump(seconds)

    async def status(self, job_id: str, *statuses: str) -> Job:
        return await self.until(job_id, lambda job: job.status in statuses)

    def started_event(self, job_id: str) -> trio.Event:
        return self.started.setdefault(job_id, trio.Event())

    def release_event(self, job_id: str) -> trio.Event:
        return self.release.setdefault(job_id, trio.Event())

    def registry(self) -> HandlerRegistry:
        """echo and sleep, plus `gate`: starts, then waits until the test releases it."""
        registry = default_registry.copy()

        async def gate(ctx: JobContext, data: Any) -> Any:
            self.calls.append((ctx.id, ctx.attempts_made))
            self.started_event(ctx.id).set()
            await self.release_event(ctx.id).wait()
            return {"gated": data}

        registry.register("gate", gate)
        return registry


@pytest.fixture
async def harness(tmp_path: Path, mock_clock: trio.testing.MockClock) -> AsyncIterator[Harness]:
    async with SQLiteEventStore.open(tmp_path / "jobs.db") as store:
        queue = await JobQueue.open(store, clock=mock_clock.current_time, random=lambda: 0.5)
        yield Harness(store, queue, mock_clock)


@asynccontextmanager
async def running(
    h: Harness, registry: HandlerRegistry | None = None, config: WorkerConfig = CONFIG,
    governor: Governor | None = None,
) -> AsyncIterator[Worker]:
    worker = Worker(h.queue, registry or h.registry(), config, store=h.store,
                    governor=governor, log=lambda line: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        yield worker
        nursery.cancel_scope.cancel()


# -- running and recording ----------------------------------------------------------


async def test_given_a_waiting_echo_job_when_a_worker_runs_then_it_completes_with_its_data(harness, mock_clock):
    job = await harness.queue.submit("echo", {"x": [1, 2]})
    async with running(harness):
        done = await harness.status(job.id, "completed")
    assert done.result == {"x": [1, 2]}
    assert (done.attempts_made, done.attempts_started) == (1, 1)
    assert done.lock_token is None


async def test_given_an_idle_worker_when_a_job_is_submitted_then_it_runs_without_the_clock_moving(harness, mock_clock):
    async with running(harness):
        before = trio.current_time()
        job = await harness.queue.submit("echo", "hi")
        done = await harness.status(job.id, "completed")
        # The clock is frozen: the worker was woken by the commit, not by a timer.
        assert trio.current_time() == before
    assert done.result == "hi"


async def test_given_a_job_with_no_handler_here_when_the_worker_runs_then_it_is_left_waiting(harness, mock_clock):
    foreign = await harness.queue.submit("resize-image", {})
    mine = await harness.queue.submit("echo", 1)
    async with running(harness):
        await harness.status(mine.id, "completed")
        still = await harness.queue.get(foreign.id)
    assert still is not None and still.status == "waiting" and still.attempts_started == 0


async def test_given_more_jobs_than_concurrency_then_only_that_many_run_at_once(harness, mock_clock):
    jobs = [await harness.queue.submit("gate", i) for i in range(6)]
    async with running(harness, config=msgspec_replace(CONFIG, concurrency=2)):
        first_two = [j for j in jobs[:2]]
        for j in first_two:
            await harness.started_event(j.id).wait()
        active = await harness.queue.list(status="active")
        assert sorted(j.id for j in active) == sorted(j.id for j in first_two)
        for j in jobs:
            harness.release_event(j.id).set()
        for j in jobs:
            await harness.status(j.id, "completed")
    assert len(harness.calls) == 6


async def test_given_many_short_jobs_then_each_round_of_completions_claims_the_next_within_the_limit(harness, mock_clock):
    registry = harness.registry()
    running_now: list[int] = [0]
    most: list[int] = [0]

    @registry_job(registry, "short")
    async def short(ctx: JobContext, data: Any) -> Any:
        running_now[0] += 1
        most[0] = max(most[0], running_now[0])
        await trio.lowlevel.checkpoint()
        running_now[0] -= 1
        return data

    jobs = [await harness.queue.submit("short", i) for i in range(12)]
    async with running(harness, registry, config=msgspec_replace(CONFIG, concurrency=3)) as worker:
        for j in jobs:
            done = await harness.status(j.id, "completed")
            assert (done.result, done.attempts_made) == (j.data, 1)
    assert most[0] <= 3
    # jobs finishing together were recorded together
    assert worker._completions.rounds_written < 12


def msgspec_replace(config: WorkerConfig, **changes: Any) -> WorkerConfig:
    import msgspec

    return msgspec.structs.replace(config, **changes)


# -- failures ----------------------------------------------------------------------


async def test_given_a_failing_handler_then_it_is_retried_by_backoff_and_dead_when_attempts_run_out(harness, mock_clock):
    registry = harness.registry()
    seen: list[int] = []

    @registry_job(registry, "flaky")
    async def flaky(ctx: JobContext, data: Any) -> Any:
        seen.append(ctx.attempts_made)
        raise ValueError(f"boom {ctx.attempts_made}")

    job = await harness.queue.submit(
        "flaky", None, {"max_attempts": 2, "backoff": {"kind": "fixed", "delay_ms": 5_000, "jitter": 0}}
    )
    async with running(harness, registry):
        delayed = await harness.status(job.id, "delayed")
        assert (delayed.attempts_made, delayed.error) == (1, "ValueError: boom 0")
        await harness.jump(5.1)  # past the backoff: promoted, claimed, fails again
        dead = await harness.status(job.id, "dead")
    assert dead.attempts_made == 2
    assert dead.error == "ValueError: boom 1"
    assert seen == [0, 1]


async def test_given_an_unrecoverable_error_then_the_job_is_dead_at_once(harness, mock_clock):
    registry = harness.registry()

    @registry_job(registry, "doomed")
    async def doomed(ctx: JobContext, data: Any) -> Any:
        raise UnrecoverableError("bad input, do not retry")

    job = await harness.queue.submit("doomed", None, {"max_attempts": 5})
    async with running(harness, registry):
        dead = await harness.status(job.id, "dead")
    assert (dead.error, dead.attempts_made) == ("bad input, do not retry", 1)


class NotAnException(BaseException):
    pass


async def test_given_a_handler_raising_a_non_exception_then_its_string_is_recorded(harness, mock_clock):
    registry = harness.registry()

    @registry_job(registry, "odd")
    async def odd(ctx: JobContext, data: Any) -> Any:
        raise NotAnException("strange thing")

    job = await harness.queue.submit("odd", None, {"max_attempts": 1})
    async with running(harness, registry):
        dead = await harness.status(job.id, "dead")
    assert dead.error == "strange thing"


async def test_given_a_result_that_is_not_json_then_the_job_is_dead_not_stuck(harness, mock_clock):
    registry = harness.registry()

    @registry_job(registry, "weird")
    async def weird(ctx: JobContext, data: Any) -> Any:
        return object()

    job = await harness.queue.submit("weird", None)
    async with running(harness, registry):
        dead = await harness.status(job.id, "dead")
    assert dead.error and "result" in dead.error


def registry_job(registry: HandlerRegistry, name: str) -> Callable[[Any], Any]:
    def decorate(fn: Any) -> Any:
        return registry.register(name, fn)

    return decorate


# -- timeouts and abandoned handlers --------------------------------------------------


async def test_given_a_timeout_when_the_handler_overruns_then_it_is_cancelled_and_dead(harness, mock_clock):
    job = await harness.queue.submit("sleep", {"ms": 60_000}, {"timeout_ms": 1_000, "max_attempts": 3})
    async with running(harness):
        await harness.status(job.id, "active")
        await harness.jump(1.01)
        dead = await harness.status(job.id, "dead")
    assert dead.error == "timeout exceeded"
    assert dead.attempts_made == 1  # no retry, though two attempts were left


def stubborn_registry(harness: Any) -> tuple[Any, trio.Event]:
    """A registry with a "stubborn" handler that shields itself from cancellation
    until the returned event is set."""
    registry = harness.registry()
    let_go = trio.Event()

    @registry_job(registry, "stubborn")
    async def stubborn(ctx: JobContext, data: Any) -> Any:
        harness.started_event(ctx.id).set()
        with trio.CancelScope(shield=True):
            await let_go.wait()
        return "too late"

    return registry, let_go


async def test_given_a_handler_that_ignores_the_abort_then_it_is_abandoned_and_the_worker_keeps_serving(harness, mock_clock):
    registry, let_go = stubborn_registry(harness)

    # The abort grace (2 s) ends before the wall-clock sweep's 2 x timeout (10 s).
    job = await harness.queue.submit("stubborn", None, {"timeout_ms": 5_000})
    async with running(harness, registry, msgspec_replace(CONFIG, concurrency=1)) as worker:
        await harness.started_event(job.id).wait()
        await harness.jump(5.01)  # timeout: cancelled, but it shields itself
        await harness.jump(CONFIG.abort_grace_ms / 1000 + 0.01)
        dead = await harness.status(job.id, "dead")
        assert dead.error == "handler ignored abort"
        assert worker.abandoned == 1
        # The only slot was freed: the worker still serves.
        after = await harness.queue.submit("echo", "still here")
        assert (await harness.status(after.id, "completed")).result == "still here"
        let_go.set()


async def test_given_a_job_without_a_timeout_whose_handler_ignores_a_pause_then_it_is_abandoned_and_the_slot_freed(harness, mock_clock):
    registry, let_go = stubborn_registry(harness)

    job = await harness.queue.submit("stubborn", None)  # no timeout: no executor task
    async with running(harness, registry, msgspec_replace(CONFIG, concurrency=1)) as worker:
        await harness.started_event(job.id).wait()
        run = worker.active[job.id]
        await harness.queue.pause(job.id)  # cancelled, but it shields itself
        await harness.status(job.id, "paused")
        await run.settled.wait()  # the worker saw the pause (its grace runs from here)
        await harness.jump(CONFIG.abort_grace_ms / 1000 + 0.01)
        # The only slot is freed after the grace: the worker still serves.
        after = await harness.queue.submit("echo", "still here")
        assert (await harness.status(after.id, "completed")).result == "still here"
        assert worker.abandoned == 1
        let_go.set()
    paused = await harness.queue.get(job.id)
    assert paused is not None and paused.status == "paused" and paused.result is None


async def test_given_jobs_with_and_without_timeouts_finishing_together_then_all_complete_once(harness, mock_clock):
    registry = harness.registry()

    @registry_job(registry, "quick")
    async def quick(ctx: JobContext, data: Any) -> Any:
        await trio.lowlevel.checkpoint()
        return data

    jobs = [
        await harness.queue.submit("quick", i, {"timeout_ms": 60_000} if i % 2 else None)
        for i in range(20)
    ]
    async with running(harness, registry, msgspec_replace(CONFIG, concurrency=5)) as worker:
        for j in jobs:
            done = await harness.status(j.id, "completed")
            assert (done.result, done.attempts_made, done.attempts_started) == (j.data, 1, 1)
        assert worker.completed == 20 and worker.failed == 0
        assert not worker.active


# -- leases, stalls, infrastructure aborts -----------------------------------------------


async def test_given_a_long_job_then_renewals_keep_its_lease_past_many_lease_periods(harness, mock_clock):
    job = await harness.queue.submit("gate", None)
    async with running(harness):
        await harness.started_event(job.id).wait()
        for _ in range(10):  # five leases long, with the stall sweep running
            await harness.jump(LEASE_MS / 2000)
            now_ms = int(trio.current_time() * 1000)
            await harness.until(job.id, lambda j, now=now_ms: (j.lock_until or 0) >= now + LEASE_MS)
        harness.release_event(job.id).set()
        done = await harness.status(job.id, "completed")
    assert done.stalled_counter == 0 and done.attempts_started == 1


async def test_given_long_jobs_started_at_different_times_then_each_keeps_its_lease_and_a_finished_one_is_not_renewed(harness, mock_clock):
    # given three gated jobs whose handlers start a quarter lease apart
    first, second, third = [await harness.queue.submit("gate", i) for i in range(3)]
    async with running(harness):
        await harness.started_event(first.id).wait()
        for job in (second, third):
            await harness.jump(LEASE_MS / 4000)
            await harness.started_event(job.id).wait()
        # when the first one finishes and the clock runs four lease periods on
        harness.release_event(first.id).set()
        done = await harness.status(first.id, "completed")
        for _ in range(8):
            await harness.jump(LEASE_MS / 2000)
            now_ms = int(trio.current_time() * 1000)
            for job in (second, third):
                # then the two still running are renewed, each on its own schedule
                await harness.until(job.id, lambda j, now=now_ms: (j.lock_until or 0) >= now + LEASE_MS / 2)
        # and the finished one saw no renewal after its completion
        events = [r.event.type for r in await harness.store.read_stream(f"job-{first.id}")]
        assert events[-1] == "job.completed"
        for job in (second, third):
            harness.release_event(job.id).set()
            finished = await harness.status(job.id, "completed")
            assert finished.stalled_counter == 0 and finished.attempts_started == 1
    assert done.attempts_started == 1


async def test_given_a_holder_that_died_then_the_stall_sweep_requeues_it_without_an_attempt(harness, mock_clock):
    job = await harness.queue.submit("echo", "orphan")
    lost = await harness.queue.claim({"echo"}, worker_id="dead-worker", lease_ms=LEASE_MS)
    assert lost is not None and lost.id == job.id
    async with running(harness):
        await harness.jump((LEASE_MS + CONFIG.stall_grace_ms) / 1000 + 0.6)
        done = await harness.status(job.id, "completed")
    assert done.stalled_counter == 1
    assert done.attempts_made == 1  # the stalled run did not count
    assert done.attempts_started == 2


async def test_given_a_lost_lease_then_the_handler_is_cancelled_and_no_attempt_is_consumed(harness, mock_clock):
    job = await harness.queue.submit("gate", None)
    async with running(harness):
        await harness.started_event(job.id).wait()
        first_token = (await harness.queue.get(job.id)).lock_token
        # Another worker's sweep, with a clock far ahead, decides our lease expired.
        far = int(trio.current_time() * 1000) + 10 * LEASE_MS
        assert await harness.queue.sweep_stalled(now=far, grace_ms=0) == [job.id]
        # We lose the job; it is waiting again and this worker claims it afresh.
        again = await harness.until(job.id, lambda j: j.status == "active" and j.lock_token != first_token)
        assert again.attempts_made == 0 and again.stalled_counter == 1
        harness.release_event(job.id).set()
        done = await harness.status(job.id, "completed")
    assert [attempts for _, attempts in harness.calls] == [0, 0]
    assert done.attempts_made == 1


async def test_given_a_shutdown_when_a_job_outlives_the_grace_then_it_is_released_unconsumed(harness, mock_clock):
    job = await harness.queue.submit("sleep", {"ms": 600_000})
    worker = Worker(harness.queue, harness.registry(), CONFIG, store=harness.store, log=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await harness.status(job.id, "active")
        worker.stop()
        await harness.jump(CONFIG.shutdown_grace_ms / 1000 + 0.01)
        await worker.wait_stopped()
    released = await harness.queue.get(job.id)
    assert released.status == "waiting"
    assert released.attempts_made == 0 and released.lock_token is None


async def test_given_a_shutdown_when_a_job_finishes_within_the_grace_then_it_completes(harness, mock_clock):
    job = await harness.queue.submit("gate", "soon")
    worker = Worker(harness.queue, harness.registry(), CONFIG, store=harness.store, log=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await harness.started_event(job.id).wait()
        worker.stop()
        late = await harness.queue.submit("echo", "after stop")
        harness.release_event(job.id).set()
        await worker.wait_stopped()
    assert (await harness.queue.get(job.id)).status == "completed"
    assert (await harness.queue.get(late.id)).status == "waiting"  # claimed nothing new


# -- pause, resume, cancel ------------------------------------------------------------


async def test_given_an_active_job_when_paused_then_its_handler_is_cancelled_and_no_failure_recorded(harness, mock_clock):
    registry = harness.registry()
    reasons: list[str | None] = []
    stopped = trio.Event()

    @registry_job(registry, "steady")
    async def steady(ctx: JobContext, data: Any) -> Any:
        await ctx.progress({"step": 1, "total": 2})
        harness.started_event(ctx.id).set()
        try:
            await trio.sleep_forever()
        finally:
            reasons.append(ctx.abort_reason)
            stopped.set()

    job = await harness.queue.submit("steady", None)
    async with running(harness, registry):
        await harness.started_event(job.id).wait()
        await harness.queue.pause(job.id)
        paused = await harness.status(job.id, "paused")
        await stopped.wait()
    assert reasons == ["paused"]
    assert paused.error is None and paused.attempts_made == 0
    assert paused.progress == {"step": 1, "total": 2}


async def test_given_a_paused_job_when_resumed_then_it_runs_again(harness, mock_clock):
    job = await harness.queue.submit("gate", None)
    async with running(harness):
        await harness.started_event(job.id).wait()
        await harness.queue.pause(job.id)
        await harness.status(job.id, "paused")
        harness.started.pop(job.id)
        await harness.queue.resume(job.id)
        await harness.started_event(job.id).wait()
        harness.release_event(job.id).set()
        done = await harness.status(job.id, "completed")
    assert done.attempts_made == 1 and len(harness.calls) == 2


async def test_given_an_active_job_when_cancelled_then_its_handler_stops(harness, mock_clock):
    registry = harness.registry()
    reasons: list[str | None] = []
    stopped = trio.Event()

    @registry_job(registry, "long")
    async def long(ctx: JobContext, data: Any) -> Any:
        harness.started_event(ctx.id).set()
        try:
            await trio.sleep_forever()
        finally:
            reasons.append(ctx.abort_reason)
            stopped.set()

    job = await harness.queue.submit("long", None)
    async with running(harness, registry):
        await harness.started_event(job.id).wait()
        assert await harness.queue.cancel(job.id) == [job.id]
        await harness.status(job.id, "cancelled")
        await stopped.wait()
    assert reasons == ["cancelled"]


# -- delayed jobs, the context --------------------------------------------------------


async def test_given_a_delayed_job_then_it_runs_only_once_due(harness, mock_clock):
    job = await harness.queue.submit("echo", "later", {"delay_ms": 5_000})
    async with running(harness):
        await harness.jump(4.0)
        assert await harness.queue.promote_delayed() == []
        assert (await harness.queue.get(job.id)).status == "delayed"
        await harness.jump(1.2)
        done = await harness.status(job.id, "completed")
    assert done.result == "later"


async def test_given_a_handler_using_its_context_then_progress_tokens_log_and_children_are_recorded(harness, mock_clock):
    registry = harness.registry()

    @registry_job(registry, "parent")
    async def parent(ctx: JobContext, data: Any) -> Any:
        messages = await ctx.inbox()
        if messages:  # second run: the child is done
            return {"children": [m.payload for m in messages]}
        await ctx.progress({"step": 1, "total": 2, "message": "spawning"})
        await ctx.tokens(input=100, output=20, cache_read=5)
        await ctx.log("spawning one child")
        await ctx.spawn("echo", {"from": ctx.id})
        return None

    job = await harness.queue.submit("parent", None)
    async with running(harness, registry):
        done = await harness.status(job.id, "completed")
    assert done.progress == {"step": 1, "total": 2, "message": "spawning"}
    assert (done.tokens.input, done.tokens.output, done.tokens.cache_read) == (100, 20, 5)
    assert [e.text for e in await harness.queue.transcript(job.id)] == ["spawning one child"]
    children = done.result["children"]
    assert len(children) == 1 and children[0]["outcome"] == "complete"
    assert children[0]["result"] == {"from": job.id}


async def test_a_worker_writes_a_heartbeat_row_and_marks_it_stopped(harness, mock_clock):
    import sqlite3

    async with running(harness) as worker:
        pass
    conn = sqlite3.connect(harness.store.path)
    row = conn.execute(
        "SELECT worker_id, beats, stopped_at IS NOT NULL FROM worker_heartbeats"
    ).fetchone()
    conn.close()
    assert row == (worker.id, 1, 1)


# -- the resource governor --------------------------------------------------------------


def test_governor_halves_under_load_grows_when_idle_and_stays_within_floor_and_ceiling():
    policy = GovernorPolicy(floor=2, ceiling=16)
    busy, idle = LoadSample(cpu_percent=99, memory_percent=10), LoadSample(cpu_percent=5, memory_percent=10)
    assert decide(policy, 16, busy).limit == 8
    assert decide(policy, 3, busy).limit == 2
    assert decide(policy, 2, busy).limit == 2
    assert decide(policy, 8, idle).limit == 10
    assert decide(policy, 16, idle).limit == 16
    assert decide(policy, 8, LoadSample(cpu_percent=80, memory_percent=10)).limit == 8
    assert not decide(policy, 8, busy).trip_breaker
    assert decide(policy, 8, LoadSample(cpu_percent=5, memory_percent=96)).trip_breaker


async def test_given_memory_over_the_breaker_then_the_lowest_priority_active_job_dies(harness, mock_clock):
    samples = [LoadSample(cpu_percent=10, memory_percent=50)]
    governor = Governor(GovernorPolicy(floor=1, ceiling=4, interval_s=1.0), sampler=lambda: samples[-1])
    urgent = await harness.queue.submit("gate", "urgent", {"priority": 0})
    bulk = await harness.queue.submit("gate", "bulk", {"priority": 10})
    async with running(harness, governor=governor):
        await harness.started_event(urgent.id).wait()
        await harness.started_event(bulk.id).wait()
        samples.append(LoadSample(cpu_percent=10, memory_percent=97))
        await harness.jump(1.01)
        dead = await harness.status(bulk.id, "dead")
        assert dead.error == BREAKER_ERROR
        assert (await harness.queue.get(urgent.id)).status == "active"
        harness.release_event(urgent.id).set()
        await harness.status(urgent.id, "completed")


async def test_given_cpu_overload_then_the_worker_claims_no_more_than_the_governed_limit(harness, mock_clock):
    governor = Governor(GovernorPolicy(floor=1, ceiling=4, interval_s=1.0),
                        sampler=lambda: LoadSample(cpu_percent=99, memory_percent=10))
    async with running(harness, governor=governor) as worker:
        for _ in range(2):  # 4 -> 2 -> 1
            await harness.jump(1.01)
        await trio.testing.wait_all_tasks_blocked()
        assert worker.limit == 1
        jobs = [await harness.queue.submit("gate", i) for i in range(3)]
        await harness.started_event(jobs[0].id).wait()
        assert [j.id for j in await harness.queue.list(status="active")] == [jobs[0].id]
        for job in jobs:
            harness.release_event(job.id).set()
        for job in jobs:
            await harness.status(job.id, "completed")


# -- loading handlers ---------------------------------------------------------------------


def test_importing_a_handler_file_registers_its_jobs(tmp_path: Path):
    module = tmp_path / "my_handlers.py"
    module.write_text(
        "import gormes\n\n@gormes.job('greet')\nasync def greet(ctx, data):\n    return 'hi ' + data\n"
    )
    import_handlers(str(module))
    assert "greet" in default_registry


@pytest.mark.parametrize("spec, says", [
    ("no_such_module_xyz", "ModuleNotFoundError"),
    ("/nowhere/handlers.py", "no such file"),
])
def test_a_handler_module_that_cannot_be_imported_is_one_clear_error(spec: str, says: str):
    with pytest.raises(HandlerImportError, match=says):
        import_handlers(spec)


def test_a_handler_file_that_raises_at_import_is_one_clear_error(tmp_path: Path):
    module = tmp_path / "broken.py"
    module.write_text("raise RuntimeError('no config')\n")
    with pytest.raises(HandlerImportError, match="RuntimeError: no config"):
        import_handlers(str(module))
