"""Runs cut off with a lost attempt get an end: `run.cancelled` on the run and on
its descendants left with no end; a run that has ended, or that is still being
written, is left as it is."""

from __future__ import annotations

from pg_helpers import backend, backend_store  # noqa: F401 (fixture)
from run_helpers import run_events

from gormes.actors.agent_jobs.cut_off import cut_off_reason
from gormes.actors.runs.cut_off import end_cut_off_runs
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    RecordedReply,
    RunCancelled,
    RunChildSpawned,
    RunCompleted,
    RunLlmTurn,
    RunStarted,
    run_stream,
)


def started(run_id: str, parent: str | None = None) -> RunStarted:
    return RunStarted(run_id=run_id, handler="agent", handler_version="v", parent_run_id=parent,
                      depth=0 if parent is None else 1)


def turn(seq: int, tokens: int) -> RunLlmTurn:
    return RunLlmTurn(seq=seq, request_hash="h", model="m", message_count=1,
                      reply=RecordedReply(content="..."), usage=Tokens(input=tokens, output=1))


async def record(store, run_id: str, *events) -> None:
    await store.append(run_stream(run_id), list(events), expected_version=0)


async def test_a_cut_off_run_and_its_endless_descendants_are_ended_once(store) -> None:
    await record(store, "p", started("p"), turn(1, 10), RunChildSpawned(seq=2, child_run_id="c1", handler="agent"),
                 RunChildSpawned(seq=3, child_run_id="c2", handler="agent"))
    await record(store, "c1", started("c1", "p"), turn(1, 5), RunChildSpawned(seq=2, child_run_id="g", handler="agent"))
    await record(store, "c2", started("c2", "p"), RunCompleted(result="done"))
    await record(store, "g", started("g", "c1"))
    reason = cut_off_reason("J1")

    assert await end_cut_off_runs(store, "p", reason) == ["p", "c1", "g"]
    for run_id, tokens in (("p", Tokens(input=10, output=1)), ("c1", Tokens(input=5, output=1)), ("g", Tokens())):
        assert (await run_events(store, run_id))[-1] == RunCancelled(reason=reason, tokens=tokens)
    assert isinstance((await run_events(store, "c2"))[-1], RunCompleted)  # it had ended
    assert "job J1" in reason and "lost" in reason
    # a second call finds nothing left to end and writes nothing
    head = await store.head()
    assert await end_cut_off_runs(store, "p", reason) == []
    assert await store.head() == head
    assert await end_cut_off_runs(store, "no-such-run", reason) == []


async def test_a_run_still_being_written_is_left_alone(store) -> None:
    """Its worker was alive after all: it appended between our read and our append,
    so the end conflicts and nothing is recorded for it or its children."""
    await record(store, "p", started("p"), RunChildSpawned(seq=1, child_run_id="c", handler="agent"))
    await record(store, "c", started("c", "p"))

    class Racing:
        """The store, with the live run appending right after the first read."""

        def __init__(self) -> None:
            self.raced = False

        async def read_stream(self, stream: str):
            records = await store.read_stream(stream)
            if not self.raced:
                self.raced = True
                await store.append(stream, [turn(2, 3)], expected_version=records[-1].version)
            return records

        async def append(self, *args, **kwargs):
            return await store.append(*args, **kwargs)

    assert await end_cut_off_runs(Racing(), "p", cut_off_reason("J2")) == []
    assert isinstance((await run_events(store, "p"))[-1], RunLlmTurn)
    assert len(await run_events(store, "c")) == 1


async def test_a_frozen_run_that_wakes_after_being_cut_off_records_no_second_end(store) -> None:
    """Its worker was frozen, not dead: the next attempt recorded the run as cut off;
    when the run then ends by itself, the end already recorded stands alone."""
    import trio

    from gormes.actors.runs.context import RunHandlerRegistry, run_handler
    from gormes.actors.runs.manager import RunManager
    from gormes.events.runs import TERMINAL_TYPES

    handlers = RunHandlerRegistry()
    thawed = trio.Event()

    @run_handler("frozen", registry=handlers)
    async def frozen(ctx, input):
        await ctx.now()
        await thawed.wait()
        return "woke up"

    async with RunManager.open(store, handlers=handlers) as runs:
        handle = await runs.start("frozen", None)
        while len(await run_events(store, handle.run_id)) < 2:
            await trio.sleep(0.005)
        assert await end_cut_off_runs(store, handle.run_id, cut_off_reason("J3")) == [handle.run_id]
        thawed.set()
        await handle.outcome()
    ends = [e for e in await run_events(store, handle.run_id) if isinstance(e, TERMINAL_TYPES)]
    assert ends == [RunCancelled(reason=cut_off_reason("J3"), tokens=Tokens())]


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def _attempt_cut_off(queue, run_id: str, options=None, name: str = "agent"):
    """A job whose attempt started run `run_id` (with one observation), then its
    worker was lost: the run has no end. Returns the job."""
    from gormes.actors.jobs.context import JobContext

    job = await queue.submit(name, {"prompt": "p"}, options)
    claimed = await queue.claim({name}, worker_id="lost", lease_ms=1000)
    assert claimed is not None and claimed.id == job.id
    await JobContext(queue, claimed).log(f"run {run_id}", data={"agent_run": run_id})
    await record(queue.store, run_id, started(run_id), turn(1, 4))
    return job


async def test_runs_of_agent_jobs_that_ended_with_no_attempt_running_are_swept(backend, db_path) -> None:  # noqa: F811
    """Cancelled, or dead after its last stall: no next attempt will come, so a
    worker's sweep records the last attempt's run as cut off, once the job has
    been over for longer than the grace, and only then (on both backends)."""
    from gormes.actors.agent_jobs.cut_off import EndedJobRuns, ended_job_reason
    from gormes.actors.jobs.queue import JobQueue

    clock = Clock(1_800_000_000.0)
    async with backend_store(backend, db_path, clock=clock) as store:
        queue = await JobQueue.open(store, clock=clock)
        cancelled = await _attempt_cut_off(queue, "r-cancelled")
        await queue.cancel(cancelled.id)
        dead = await _attempt_cut_off(queue, "r-dead", {"max_stalled": 1})
        clock.now += 20  # its lease expired past the stall grace
        assert await queue.sweep_stalled(grace_ms=1000) == [dead.id]
        assert (await queue.get(dead.id)).status == "dead"
        other = await _attempt_cut_off(queue, "r-echo", name="echo")  # not an agent job: not looked at
        await queue.cancel(other.id)

        sweep = EndedJobRuns(queue, grace_ms=60_000)
        assert await sweep.sweep() == []  # both ended less than the grace ago
        clock.now += 61
        assert await sweep.sweep() == ["r-cancelled", "r-dead"]
        assert (await run_events(store, "r-cancelled"))[-1] == RunCancelled(
            reason=ended_job_reason(cancelled.id, "cancelled"), tokens=Tokens(input=4, output=1))
        assert (await run_events(store, "r-dead"))[-1].reason == ended_job_reason(dead.id, "dead")
        assert await sweep.sweep() == []  # nothing new
        assert len(await run_events(store, "r-echo")) == 2


async def test_the_sweep_pages_through_many_ended_jobs(backend, db_path) -> None:  # noqa: F811
    from gormes.actors.agent_jobs.cut_off import EndedJobRuns
    from gormes.actors.jobs.queue import JobQueue

    clock = Clock(1_800_000_000.0)
    async with backend_store(backend, db_path, clock=clock) as store:
        queue = await JobQueue.open(store, clock=clock)
        for i in range(5):
            job = await _attempt_cut_off(queue, f"r{i}")
            await queue.cancel(job.id)  # all five end in the same millisecond
        clock.now += 10
        sweep = EndedJobRuns(queue, grace_ms=1000, limit=2)
        swept = [await sweep.sweep() for _ in range(4)]
        assert sorted(r for batch in swept for r in batch) == [f"r{i}" for i in range(5)]
        assert [len(batch) for batch in swept] == [2, 2, 1, 0]


async def test_a_worker_sweeps_the_runs_of_ended_agent_jobs(store) -> None:
    import trio

    from agent_worker import agent_worker

    from gormes.actors.jobs.queue import JobQueue
    from gormes.actors.jobs.worker import WorkerConfig

    queue = await JobQueue.open(store)
    job = await _attempt_cut_off(queue, "r-swept")
    await queue.cancel(job.id)
    config = WorkerConfig(concurrency=1, stall_interval_ms=20, lease_ms=100, abort_grace_ms=20)
    worker = agent_worker(queue, config, store=store, log=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(10):
            while not isinstance((await run_events(store, "r-swept"))[-1], RunCancelled):
                await trio.sleep(0.02)
        worker.stop()
        await worker.wait_stopped()
    assert (await run_events(store, "r-swept"))[-1].reason.startswith(f"cut off: job {job.id} ended (cancelled)")
