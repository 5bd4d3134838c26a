"""A gateway's live-jobs cap (`GORMES_GATEWAY_MAX_LIVE_JOBS`) under concurrent
submits (an attacker's pass): it was counted before the submit, so a gateway that
fired its submits at once (many calls, or several `gormes mcp` processes) passed
it by as many as it fired, and made the operator's workers run that many more
jobs. The count is now made in the transaction that records the job, under the
store's write lock (decision 0070); a submission that joins a job it already has
(an idempotency key, a debounce window) is not a new job and is not refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from mcp_helpers import audit_events
from pg_helpers import backend_store, reopen_store

from gormes.actors.jobs.queue import JobQueue
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, OperationDenied
from gormes.tools.builtin import default_registry

GATEWAY = Caller(trust="gateway", id="mcp:mallory")
RACERS = 8  # submits at once, half through each of two stores (as two processes would be)
# Half the racers give an idempotency key of their own: a submission that could
# join a job is not refused before its transaction, so only the count there stops it.
SUBMITS = {
    "job.submit": lambda n: {"name": "echo", "data": {"n": n}} | (
        {"options": {"idempotency_key": f"k{n}"}} if n % 4 < 2 else {}),
    "run.submit": lambda n: {"prompt": f"task {n}"} | ({"idempotency_key": f"k{n}"} if n % 4 < 2 else {}),
}
REFUSAL = "'gateway' callers may hold at most 2 unfinished jobs between them"


@pytest.mark.parametrize("operation", sorted(SUBMITS))
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_concurrent_submits_never_pass_the_live_jobs_cap(
        backend: str, operation: str, db_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Eight submits at once, through two stores on one database (two connections,
    as two processes or hosts), with one place left: one job is recorded, seven
    refusals are audited, and the class holds the cap."""
    monkeypatch.setenv("GORMES_GATEWAY_MAX_LIVE_JOBS", "2")
    async with backend_store(backend, db_path) as store, reopen_store(store) as other:
        queues = [await JobQueue.open(s) for s in (store, other)]
        executors = [Executor(default_registry(), q.store, jobs=q) for q in queues]
        await executors[0].call(operation, SUBMITS[operation](-1), GATEWAY)
        outcomes: list[str] = []

        async def submit(n: int) -> None:
            try:
                await executors[n % 2].call(operation, SUBMITS[operation](n), GATEWAY)
                outcomes.append("taken")
            except OperationDenied as exc:
                assert REFUSAL in str(exc)
                outcomes.append("refused")

        async with trio.open_nursery() as nursery:
            for n in range(RACERS):
                nursery.start_soon(submit, n)
        assert sorted(outcomes) == ["refused"] * (RACERS - 1) + ["taken"]
        assert await queues[0].live_count("gateway") == 2
        assert len(await store.read_all(types=["job.submitted"])) == 2
        refused = [a for a in await audit_events(store) if a.error]
        assert len(refused) == RACERS - 1 and all(REFUSAL in a.error for a in refused)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_submission_that_joins_its_own_live_job_is_not_refused_at_the_cap(
        backend: str, db_path: Path, monkeypatch: pytest.MonkeyPatch):
    """At the cap, a resubmission under a live job's idempotency key, or into a
    debounced job's window, gets that job back (coalesced): it adds no job, so the
    cap has nothing to refuse. A new job is still refused."""
    monkeypatch.setenv("GORMES_GATEWAY_MAX_LIVE_JOBS", "2")
    async with backend_store(backend, db_path) as store:
        queue = await JobQueue.open(store)
        executor = Executor(default_registry(), store, jobs=queue)
        keyed = await executor.call("run.submit", {"prompt": "p", "idempotency_key": "nightly"}, GATEWAY)
        debounced = {"name": "echo", "options": {"debounce_key": "d", "debounce_ms": 60_000}}
        window = await executor.call("job.submit", debounced, GATEWAY)
        again = await executor.call("run.submit", {"prompt": "p", "idempotency_key": "nightly"}, GATEWAY)
        joined = await executor.call("job.submit", debounced, GATEWAY)
        with pytest.raises(OperationDenied, match=REFUSAL):
            await executor.call("job.submit", {"name": "echo"}, GATEWAY)
        assert (again.id, again.coalesced) == (keyed.id, True)
        assert (joined.id, joined.coalesced) == (window.id, True)
        assert await queue.live_count("gateway") == 2


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_the_cap_counts_the_classs_live_jobs_only_and_an_ended_job_frees_its_place(
        backend: str, db_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The count is read from an index of the capped classes' live jobs (decision
    0070's addendum): the operator's jobs and a child agent's take no gateway place;
    a gateway job that completes, or that the gateway cancels, frees one, and only
    one, at once; one the operator retries after it died takes one back."""
    monkeypatch.setenv("GORMES_GATEWAY_MAX_LIVE_JOBS", "2")
    operator = Caller(trust="operator", id="cli")
    child = Caller(trust="child-agent", id="run-r1")
    async with backend_store(backend, db_path) as store:
        queue = await JobQueue.open(store)
        executor = Executor(default_registry(), store, jobs=queue)
        for n in range(5):
            await executor.call("job.submit", {"name": "work", "data": {"n": n}}, operator)
        await executor.call("job.submit", {"name": "echo"}, child)
        first = await executor.call("job.submit", {"name": "echo", "options": {"max_attempts": 1}}, GATEWAY)
        second = await executor.call("job.submit", {"name": "echo"}, GATEWAY)
        with pytest.raises(OperationDenied, match=REFUSAL):
            await executor.call("job.submit", {"name": "echo"}, GATEWAY)

        [held] = [j for j in await queue.claim_many({"echo"}, limit=10) if j.id == first.id]
        await queue.complete(held.id, held.lock_token, "done")
        third = await executor.call("job.submit", {"name": "echo"}, GATEWAY)
        with pytest.raises(OperationDenied, match=REFUSAL):
            await executor.call("job.submit", {"name": "echo"}, GATEWAY)

        await executor.call("job.cancel", {"id": second.id}, GATEWAY)
        fourth = await executor.call("job.submit", {"name": "echo", "options": {"max_attempts": 1}}, GATEWAY)
        with pytest.raises(OperationDenied, match=REFUSAL):
            await executor.call("job.submit", {"name": "echo"}, GATEWAY)

        [dying] = [j for j in await queue.claim_many({"echo"}, limit=10) if j.id == fourth.id]
        await queue.fail(dying.id, dying.lock_token, "boom")  # one attempt: dead, its place freed
        await queue.retry(fourth.id)  # live again: its place taken back
        with pytest.raises(OperationDenied, match=REFUSAL):
            await executor.call("job.submit", {"name": "echo"}, GATEWAY)
        assert await queue.live_count("gateway") == 2
        assert {third.id, fourth.id} <= {j.id for j in await queue.list(limit=100) if j.live}
