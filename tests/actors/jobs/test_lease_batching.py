"""Lease renewal at thousands of jobs: one transaction a look, none lapsing (issue 20).

On trio's MockClock at rate 0: nothing moves unless a test jumps it, so a lease
"expires" only if the keeper failed to renew it before the jump that outran it.
These fail if renewal regressed to one transaction per job (they count calls of
`renew_leases_in`, the transaction body, and the jobs each call renews).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from gormes.actors.jobs import leases
from gormes.actors.jobs.context import JobContext
from gormes.actors.jobs.handlers import default_registry
from gormes.actors.jobs.leases import keep_leases, renew_leases
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.worker import Worker, WorkerConfig
from gormes.events.log_base import LogBase
from gormes.events.sqlite import SQLiteEventStore

INTERVAL_S = 5.0  # lease/2
LEASE_S = 2 * INTERVAL_S


class FakeRun:
    """A running job as the keeper sees it, with the lease its renewals gave it."""

    def __init__(self, i: int) -> None:
        self.lease_id, self.lease_token = f"job-{i}", f"token-{i}"
        self.renew_at = trio.current_time() + INTERVAL_S
        self.renewals_stopped = False
        self.renewal: trio.CancelScope | None = None
        self.lease_state: Any = None
        self.lock_until = trio.current_time() + LEASE_S


async def test_given_5000_running_jobs_then_each_look_renews_all_that_are_due_in_one_call_and_none_lapses(mock_clock):
    runs = {i: FakeRun(i) for i in range(5_000)}
    calls: list[int] = []

    async def renew_many(due: Any) -> list[Any]:
        calls.append(len(due))
        await trio.lowlevel.checkpoint()  # a commit is a schedule point
        now = trio.current_time()
        for run in due:
            run.lock_until = now + LEASE_S
        return ["renewed"] * len(due)

    async def refused(run: Any) -> bool:  # pragma: no cover - nothing is refused here
        raise AssertionError(f"{run.lease_id} refused")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_leases, runs, INTERVAL_S, renew_many, refused)
        for _ in range(12):  # six leases long, in steps of a quarter of one
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(LEASE_S / 4)
            await trio.testing.wait_all_tasks_blocked()
            now = trio.current_time()
            assert min(r.lock_until for r in runs.values()) > now, "a lease lapsed"
        nursery.cancel_scope.cancel()
    # all 5,000 started together: every call renewed all of them, once per interval
    assert calls and set(calls) == {5_000}
    assert len(calls) == 6  # at 5, 10, ... 30 s: every lease/2 of the 30 s jumped


async def test_given_jobs_that_settle_then_they_are_left_out_of_the_next_batch(mock_clock):
    runs = {i: FakeRun(i) for i in range(10)}
    calls: list[list[str]] = []

    async def renew_many(due: Any) -> list[Any]:
        calls.append([r.lease_id for r in due])
        return ["renewed"] * len(due)

    async def refused(run: Any) -> bool:  # pragma: no cover
        raise AssertionError

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_leases, runs, INTERVAL_S, renew_many, refused)
        for i in range(5):
            runs[i].renewals_stopped, runs[i].renew_at = True, math.inf
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(INTERVAL_S)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert calls == [[f"job-{i}" for i in range(5, 10)]]


async def test_given_a_batch_that_fails_then_every_job_is_due_again_at_the_next_look(mock_clock):
    from gormes.errors import StoreError

    runs = {i: FakeRun(i) for i in range(3)}
    calls: list[float] = []

    async def renew_many(due: Any) -> list[Any]:
        calls.append(trio.current_time())
        if len(calls) == 1:
            raise StoreError("database is locked")
        return ["renewed"] * len(due)

    async def refused(run: Any) -> bool:  # pragma: no cover
        raise AssertionError

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_leases, runs, INTERVAL_S, renew_many, refused)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(INTERVAL_S)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(INTERVAL_S / leases.LOOKS)  # the keeper's shortest pause
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert len(calls) == 2 and calls[1] - calls[0] == pytest.approx(INTERVAL_S / leases.LOOKS)
    assert all(r.renew_at == pytest.approx(calls[1] + INTERVAL_S) for r in runs.values())


# -- on a real store ------------------------------------------------------------------


@pytest.fixture
async def queue(tmp_path: Path, mock_clock: trio.testing.MockClock) -> Any:
    async with SQLiteEventStore.open(tmp_path / "jobs.db") as store:
        yield await JobQueue.open(store, clock=mock_clock.current_time, random=lambda: 0.5)


def spy_stream_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict[str, int]]]:
    """Each `LogBase.read_streams` from now on: (its streams, the versions it read after)."""
    reads: list[tuple[list[str], dict[str, int]]] = []
    whole = LogBase.read_streams

    def spy(self: Any, streams: Any, after: Any = None) -> Any:
        streams = list(streams)
        reads.append((streams, dict(after or {})))
        return whole(self, streams, after)

    monkeypatch.setattr(LogBase, "read_streams", spy)
    return reads


def gated(n: int, first: Callable[[JobContext], Awaitable[None]] | None = None) -> tuple[Any, trio.Event, trio.Event]:
    """(a job handler that runs `first(ctx)`, then waits for `release`; `release`;
    `all_in`, set once `n` jobs are waiting in it)."""
    release, all_in = trio.Event(), trio.Event()
    waiting: list[str] = []

    async def handler(ctx: JobContext, data: Any) -> Any:
        if first is not None:
            await first(ctx)
        waiting.append(ctx.id)
        if len(waiting) == n:
            all_in.set()
        await release.wait()
        return data

    return handler, release, all_in


def count_renewals(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many jobs each renewal transaction (`renew_leases_in`) renews, from now on."""
    sizes: list[int] = []
    real = leases.renew_leases_in

    def counted(s: Any, batch: Any, *args: Any) -> Any:
        sizes.append(len(batch))
        return real(s, batch, *args)

    monkeypatch.setattr(leases, "renew_leases_in", counted)
    return sizes


async def submit(queue: JobQueue, n: int, name: str) -> list[Any]:
    jobs: list[Any] = []

    async def one(i: int) -> None:
        jobs.append(await queue.submit(name, i))

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    return jobs


async def test_renew_leases_renews_many_jobs_in_one_transaction_and_refuses_a_stale_token_alone(queue, mock_clock):
    await submit(queue, 300, "echo")
    claimed = await queue.claim_many({"echo"}, worker_id="w", lease_ms=10_000, limit=300)
    assert len(claimed) == 300
    leased = [(j.id, j.lock_token) for j in claimed]
    leased[7] = (leased[7][0], "not-the-token")
    before = queue.store.batches_committed
    mock_clock.jump(3)
    states = await renew_leases(queue.store, queue.now_ms, leased, 10_000)
    assert queue.store.batches_committed - before == 1
    assert states[7] is None
    now_ms = int(trio.current_time() * 1000)
    assert all(s is not None and s.lock_until == now_ms + 10_000 for i, s in enumerate(states) if i != 7)
    # the next renewal starts from the states this one left (their streams did not move)
    again = await renew_leases(queue.store, queue.now_ms, [leased[0]], 10_000,
                               known=[s for s in states if s is not None])
    assert again[0] is not None and again[0].version == states[0].version + 1


async def test_given_kept_states_gone_stale_then_a_renewal_folds_only_the_events_after_them(
    queue, mock_clock, monkeypatch
):
    """An agent job appends `job.tokens_added` every turn, so the state a renewal
    kept is behind by the next one: the next renewal reads only the events after
    it (one read of all the tails), decides on the state brought up to date, and
    still refuses a holder whose job was taken over meanwhile."""
    from gormes.actors.actor import fold
    from gormes.actors.jobs.actor import JOB

    await submit(queue, 3, "echo")
    claimed = await queue.claim_many({"echo"}, worker_id="w", lease_ms=10_000, limit=3)
    leased = [(j.id, j.lock_token) for j in claimed]
    kept = await renew_leases(queue.store, queue.now_ms, leased, 10_000)
    assert all(s is not None for s in kept)
    # meanwhile: tokens on the first two; the third released and claimed by another holder
    await queue.add_tokens(leased[0][0], leased[0][1], input=5, model="m")
    await queue.add_tokens(leased[1][0], leased[1][1], input=7, model="m")
    await queue.release(leased[2][0], leased[2][1], "taken over")
    other = await queue.claim({"echo"}, worker_id="w2", lease_ms=10_000)
    assert other is not None and other.id == leased[2][0]

    reads = spy_stream_reads(monkeypatch)
    mock_clock.jump(3)
    states = await renew_leases(queue.store, queue.now_ms, leased, 10_000, known=kept)
    assert states[2] is None  # its token no longer holds it
    assert len(reads) == 1  # one read of all three tails
    streams, after = reads[0]
    assert after == {f"job-{jid}": s.version for (jid, _), s in zip(leased, kept, strict=True)}
    for (job_id, _), state in zip(leased[:2], states[:2], strict=True):
        folded = fold(JOB, [r.event for r in await queue.store.read_stream(f"job-{job_id}")])
        assert state == folded.value  # the tail fold is the whole fold
    assert states[0].tokens.input == 5 and states[1].tokens.input == 7


async def test_given_a_worker_running_500_gated_jobs_then_each_interval_renews_them_in_one_transaction(
    queue, mock_clock, monkeypatch,
):
    n, lease_ms = 500, 10_000
    gate, release, all_started = gated(n)
    registry = default_registry.copy()
    registry.register("gate", gate)
    sizes = count_renewals(monkeypatch)
    jobs = await submit(queue, n, "gate")
    config = WorkerConfig(
        worker_id="w-many", concurrency=n, lease_ms=lease_ms, stall_interval_ms=500,
        stall_grace_ms=1_000, heartbeat_interval_ms=60_000,
    )
    worker = Worker(queue, registry, config, store=queue.store, log=lambda line: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await all_started.wait()
        for _ in range(6):  # three leases long, the stall sweep running
            await trio.testing.wait_all_tasks_blocked()
            await queue.store.transact(lambda tx: None)  # queued writes commit first
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(lease_ms / 2000)
            await trio.testing.wait_all_tasks_blocked()
            await queue.store.transact(lambda tx: None)
            await trio.testing.wait_all_tasks_blocked()
        listed = {j.id: j for j in await queue.list(status="active", limit=n)}
        release.set()
        nursery.cancel_scope.cancel()
    # every job still held, with no stall, by renewals of all 500 at once
    assert len(listed) == n and all(j.stalled_counter == 0 for j in listed.values())
    assert sorted(listed) == sorted(j.id for j in jobs)
    assert sizes and len(sizes) <= 6 and sum(sizes) == n * len(sizes)


async def test_an_urgent_transaction_commits_before_the_batch_that_filled_while_it_waited(tmp_path):
    import threading

    from gormes.events.jobs import JobLeaseRenewed

    def event(i: int) -> JobLeaseRenewed:
        return JobLeaseRenewed(lock_token=f"t{i}", lock_until=i, at=i)

    async with SQLiteEventStore.open(tmp_path / "urgent.db") as store:
        gate = threading.Event()

        def blocking(tx: Any) -> None:  # holds the writer's thread: a long commit
            tx.append("s-block", [event(0)])
            gate.wait()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.transact, blocking)
            await trio.testing.wait_all_tasks_blocked()
            for i in range(50):  # the next batch fills up meanwhile
                nursery.start_soon(store.append, f"s-{i}", [event(i)])
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(store.transact_urgent, lambda tx: tx.append("s-urgent", [event(99)]))
            await trio.testing.wait_all_tasks_blocked()
            gate.set()
        positions = {r.stream: r.position for r in await store.read_all()}
    assert positions["s-block"] == 1 and positions["s-urgent"] == 2
    assert min(positions[f"s-{i}"] for i in range(50)) == 3


async def test_a_first_renewal_starts_from_the_state_the_holder_s_last_write_left(queue, mock_clock, monkeypatch):
    """A job's first renewal has no state of an earlier renewal to start from; it
    starts from the one the queue kept of its claim or its holder's last write
    (an agent job's tokens), and reads only what was appended after that, never
    the job's whole stream."""
    n, lease_ms = 3, 10_000

    async def three_token_writes(ctx: JobContext) -> None:
        for _ in range(3):
            await ctx.tokens(input=1, model="m")

    spend, release, all_wrote = gated(n, three_token_writes)
    registry = default_registry.copy()
    registry.register("spend", spend)
    await submit(queue, n, "spend")
    config = WorkerConfig(
        worker_id="w-first", concurrency=n, lease_ms=lease_ms, stall_interval_ms=60_000,
        stall_grace_ms=60_000, heartbeat_interval_ms=60_000,
    )
    worker = Worker(queue, registry, config, store=queue.store, log=lambda line: None)
    renewed = count_renewals(monkeypatch)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await all_wrote.wait()
        await trio.testing.wait_all_tasks_blocked()
        reads = spy_stream_reads(monkeypatch)  # from here on: the renewal's reads
        mock_clock.jump(lease_ms / 2000)
        while not renewed:
            await trio.testing.wait_all_tasks_blocked()
            await queue.store.transact(lambda tx: None)
        renewal_reads = list(reads)
        listed = await queue.list(status="active", limit=n)
        renewed_states = [run.lease_state for run in worker.active.values()]
        versions = [await queue.store.stream_version(f"job-{job.id}") for job in listed]
        release.set()
        nursery.cancel_scope.cancel()
    assert renewed == [n] and len(listed) == n
    # each renewal decided on the job as its holder's writes left it: its tokens counted, at the stream's head
    assert sorted(s.tokens.input for s in renewed_states) == [3] * n
    assert sorted(s.version for s in renewed_states) == sorted(versions)
    job_reads = [(streams, after) for streams, after in renewal_reads if any(s.startswith("job-") for s in streams)]
    assert all(set(after) == set(streams) for streams, after in job_reads), job_reads  # tails only
