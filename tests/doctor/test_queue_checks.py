"""Queue and worker checks on a real job ledger, written through the real queue
with an injected clock (the doctor is then asked at a chosen `now`)."""

from __future__ import annotations

from pathlib import Path

from doctor_helpers import T0, check, doctor, fresh, sql

from gormes.actors.jobs.governor import BREAKER_ERROR
from gormes.actors.jobs.heartbeat import Heartbeat
from gormes.actors.jobs.queue import JobQueue
from gormes.events.sqlite import SQLiteEventStore
from gormes.health import Thresholds


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def _with_queue(path: Path, clock: Clock, fn) -> None:
    async with SQLiteEventStore.open(path, clock=clock) as store:
        queue = await JobQueue.open(store, clock=clock)
        await fn(queue, store)


def test_no_ledger_is_ok_and_said_so(db_path: Path):
    report = doctor(fresh(db_path))
    for name in ("queue.stalled", "queue.dead_letters", "queue.depth", "queue.wedged"):
        assert check(report, name).message.startswith("no job ledger yet")


def test_job_events_without_a_ledger_are_a_warning(db_path: Path):
    sql(fresh(db_path), "INSERT INTO events(stream, version, type, data, recorded_at) "
                        "VALUES ('job-1', 1, 'job.whatever', '{}', 0)")
    result = check(doctor(db_path), "queue.depth")
    assert result.status == "warn" and "no job ledger table" in result.message


async def test_a_job_whose_lease_expired_past_the_grace_is_stalled(db_path: Path):
    clock = Clock(T0)

    async def claim(queue, store):
        await queue.submit("echo", {})
        await queue.claim({"echo"}, worker_id="w1", lease_ms=1000)

    await _with_queue(db_path, clock, claim)
    assert check(doctor(db_path, now=T0 + 10), "queue.stalled").status == "ok"  # within grace
    result = check(doctor(db_path, now=T0 + 60), "queue.stalled")
    assert result.status == "warn" and "1 job(s)" in result.message


async def test_dead_jobs_are_counted_per_queue(db_path: Path):
    clock = Clock(T0)

    async def kill(queue, store):
        await queue.submit("echo", {}, {"queue": "mail"})
        job = await queue.claim({"echo"}, worker_id="w1")
        await queue.fail(job.id, job.lock_token, "bad input", unrecoverable=True)

    await _with_queue(db_path, clock, kill)
    result = check(doctor(db_path, now=T0), "queue.dead_letters")
    assert result.status == "warn" and "mail: 1" in result.message


async def test_the_oldest_waiting_job_warns_past_the_threshold(db_path: Path):
    clock = Clock(T0)

    async def submit(queue, store):
        await queue.submit("echo", {})

    await _with_queue(db_path, clock, submit)
    assert check(doctor(db_path, now=T0 + 60), "queue.oldest_waiting").status == "ok"
    result = check(doctor(db_path, now=T0 + 7200), "queue.oldest_waiting")
    assert result.status == "warn" and "2.0 h" in result.message


async def test_depth_per_queue_and_its_threshold(db_path: Path):
    clock = Clock(T0)

    async def submit(queue, store):
        for _ in range(3):
            await queue.submit("echo", {}, {"queue": "bulk"})
        await queue.submit("echo", {})

    await _with_queue(db_path, clock, submit)
    result = check(doctor(db_path), "queue.depth")
    assert result.status == "ok" and "bulk: 3 waiting" in result.message
    deep = check(doctor(db_path, thresholds=Thresholds(queue_depth_warn=2)), "queue.depth")
    assert deep.status == "warn" and "over 2 waiting in bulk" in deep.message


async def _waiting_job_and_worker(path: Path, *, last_beat: float, names: list[str]) -> None:
    clock = Clock(last_beat)

    async def setup(queue, store):
        await Heartbeat(store, "w-old", {"pid": 1, "queues": None, "names": names}).beat()
        clock.now = T0
        await queue.submit("echo", {})

    await _with_queue(path, clock, setup)


async def test_a_stale_heartbeat_is_not_a_live_worker_and_the_queue_is_wedged(db_path: Path):
    await _waiting_job_and_worker(db_path, last_beat=T0 - 3600, names=["echo"])
    report = doctor(db_path, now=T0 + 60)
    wedged = check(report, "queue.wedged")
    assert wedged.status == "fail"
    assert "default (1 waiting: echo)" in wedged.message
    assert "no live worker (last heartbeat" in wedged.message
    assert "live worker(s)" not in wedged.message
    heartbeats = check(report, "workers.heartbeats")
    assert heartbeats.status == "warn"
    assert heartbeats.message.startswith("0 live worker(s); 1 stopped beating")
    assert report.status == "error"


async def test_a_live_worker_with_the_handler_keeps_the_queue_unwedged(db_path: Path):
    await _waiting_job_and_worker(db_path, last_beat=T0, names=["echo"])
    report = doctor(db_path, now=T0 + 5)
    assert check(report, "queue.wedged").status == "ok"
    assert check(report, "workers.heartbeats").status == "ok"


async def test_a_live_worker_without_the_handler_does_not_serve_the_queue(db_path: Path):
    await _waiting_job_and_worker(db_path, last_beat=T0, names=["resize"])
    wedged = check(doctor(db_path, now=T0 + 5), "queue.wedged")
    assert wedged.status == "fail" and "none with a handler for them" in wedged.message


async def test_a_recent_completion_means_not_wedged(db_path: Path):
    clock = Clock(T0)

    async def work(queue, store):
        await queue.submit("echo", {})
        job = await queue.claim({"echo"}, worker_id="w1")
        await queue.complete(job.id, job.lock_token, {})
        await queue.submit("echo", {})

    await _with_queue(db_path, clock, work)
    assert check(doctor(db_path, now=T0 + 60), "queue.wedged").status == "ok"
    assert check(doctor(db_path, now=T0 + 3600), "queue.wedged").status == "fail"


async def test_wedged_and_heartbeats_are_skipped_offline(db_path: Path):
    await _waiting_job_and_worker(db_path, last_beat=T0 - 3600, names=["echo"])
    report = doctor(db_path, now=T0 + 60, offline=True)
    assert {"queue.wedged", "workers.heartbeats"} <= {s.name for s in report.skipped}


async def test_a_worker_that_said_it_stopped_is_neither_live_nor_crashed(db_path: Path):
    clock = Clock(T0)

    async def stopped(queue, store):
        beat = Heartbeat(store, "w1", {"queues": None, "names": ["echo"]})
        await beat.beat()
        await beat.stopped()

    await _with_queue(db_path, clock, stopped)
    result = check(doctor(db_path, now=T0 + 1), "workers.heartbeats")
    assert result.status == "warn" and result.message.startswith("no live worker")


async def test_circuit_breaker_trips_are_reported_within_the_window(db_path: Path):
    clock = Clock(T0)

    async def trip(queue, store):
        await queue.submit("echo", {})
        job = await queue.claim({"echo"}, worker_id="w1")
        await queue.fail(job.id, job.lock_token, BREAKER_ERROR, unrecoverable=True)

    await _with_queue(db_path, clock, trip)
    result = check(doctor(db_path, now=T0 + 60), "workers.circuit_breaker")
    assert result.status == "warn" and "killed 1 job(s)" in result.message
    assert check(doctor(db_path, now=T0 + 3 * 86400), "workers.circuit_breaker").status == "ok"
