"""workers.governor: the governor's state as live workers report it in their heartbeats."""

from __future__ import annotations

from pathlib import Path

from doctor_helpers import T0, check, doctor

from gormes.actors.jobs.governor import Governor, GovernorPolicy, LoadSample
from gormes.actors.jobs.handlers import HandlerRegistry
from gormes.actors.jobs.heartbeat import Heartbeat
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.worker import Worker, WorkerConfig
from gormes.events.sqlite import SQLiteEventStore


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def _beat_with_governor(path: Path, sample: LoadSample | None, cpu: str = "process") -> None:
    """A real worker's heartbeat, its governor having seen `sample` (None: no governor)."""
    clock = Clock(T0)
    async with SQLiteEventStore.open(path, clock=clock) as store:
        queue = await JobQueue.open(store, clock=clock)
        governor = None
        if sample is not None:
            governor = Governor(GovernorPolicy(floor=1, ceiling=8, cpu=cpu), sampler=lambda: sample)
            governor.observe(sample)
        worker = Worker(queue, HandlerRegistry(), WorkerConfig(worker_id="w1"), governor=governor,
                        log=lambda line: None)
        await Heartbeat(store, worker.id, worker._describe_self).beat()


async def test_a_governor_that_lowered_concurrency_is_a_visible_warning(db_path: Path):
    await _beat_with_governor(db_path, LoadSample(cpu_percent=99.0, memory_percent=50.0))
    result = check(doctor(db_path, now=T0 + 1), "workers.governor")
    assert result.status == "warn"
    assert "w1 at 4 of 8" in result.message and "cpu 99%" in result.message
    # and why: the governor's own reason, with whose CPU it read
    assert "cpu 99% (process) above 90%: halved 8 -> 4" in result.message
    assert "--governor-cpu process" not in result.remediation


async def test_a_governor_throttled_by_the_machines_cpu_says_how_to_read_its_own(db_path: Path):
    await _beat_with_governor(db_path, LoadSample(cpu_percent=99.0, memory_percent=50.0), cpu="machine")
    result = check(doctor(db_path, now=T0 + 1), "workers.governor")
    assert result.status == "warn" and "cpu 99% (machine) above 90%" in result.message
    assert "--governor-cpu process" in result.remediation and "[governor_policy]" in result.remediation


async def test_a_relaxed_governor_is_ok(db_path: Path):
    await _beat_with_governor(db_path, LoadSample(cpu_percent=5.0, memory_percent=20.0))
    result = check(doctor(db_path, now=T0 + 1), "workers.governor")
    assert result.status == "ok" and "1 governed worker(s) at full concurrency" in result.message
    assert "w1 at 8 of 8" in result.message and "at the ceiling 8" in result.message


async def test_no_live_worker_and_no_governor_are_said_plainly(db_path: Path):
    await _beat_with_governor(db_path, None)
    assert "run without a governor" in check(doctor(db_path, now=T0 + 1), "workers.governor").message
    stale = check(doctor(db_path, now=T0 + 3600), "workers.governor")
    assert stale.status == "ok" and stale.message.startswith("no live worker")
