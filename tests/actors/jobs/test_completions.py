"""Group completion: concurrent completes share one transaction and each caller gets
what `queue.complete` would have given it. A real temp-file store."""

from __future__ import annotations

import pytest
import trio

from gormes.actors.jobs.completions import Completions
from gormes.actors.jobs.queue import InvalidJob, JobQueue, LockLost
from gormes.errors import StoreClosed


@pytest.fixture
async def queue(store) -> JobQueue:
    return await JobQueue.open(store)


async def test_concurrent_completes_are_written_in_fewer_rounds_than_jobs(queue):
    # given 40 claimed jobs
    for i in range(40):
        await queue.submit("a", i)
    jobs = await queue.claim_many({"a"}, limit=40)
    completions = Completions(queue)
    results: dict[str, object] = {}

    async def complete(job) -> None:
        results[job.id] = await completions.complete(job.id, job.lock_token, job.data * 2)

    # when they all finish at once
    async with trio.open_nursery() as nursery:
        for job in jobs:
            nursery.start_soon(complete, job)
    # then each caller got its own completed job, written together
    assert {job_id: j.result for job_id, j in results.items()} == {j.id: j.data * 2 for j in jobs}
    assert all(j.status == "completed" for j in results.values())
    assert completions.rounds_written < 40


async def test_each_caller_gets_its_own_refusal(queue):
    # given two claimed jobs
    for i in range(2):
        await queue.submit("a", i)
    good, other = await queue.claim_many({"a"}, limit=2)
    completions = Completions(queue)
    outcomes: dict[str, object] = {}

    async def complete(name: str, job_id: str, token: str, result: object) -> None:
        try:
            outcomes[name] = await completions.complete(job_id, token, result)
        except Exception as exc:  # noqa: BLE001 - the test looks at which one
            outcomes[name] = exc

    # when one round holds a good completion, a stale token and a result that is not JSON
    async with trio.open_nursery() as nursery:
        nursery.start_soon(complete, "good", good.id, good.lock_token, "ok")
        nursery.start_soon(complete, "stale", other.id, "stale-token", "x")
        nursery.start_soon(complete, "bad", other.id, other.lock_token, {"x": object()})
    # then only the good one is written, and the others raise what complete raises
    assert outcomes["good"].status == "completed"
    assert isinstance(outcomes["stale"], LockLost)
    assert isinstance(outcomes["bad"], InvalidJob)
    assert (await queue.get(other.id)).status == "active"


async def test_a_round_that_fails_as_a_whole_gives_every_caller_the_error(queue, store):
    await queue.submit("a")
    [job] = await queue.claim_many({"a"}, limit=1)
    completions = Completions(queue)
    await store.aclose()
    with pytest.raises(StoreClosed):
        await completions.complete(job.id, job.lock_token, None)


async def test_complete_and_claim_is_complete_many_then_claim_many_in_one_commit(queue, store):
    # given two claimed jobs, three waiting, and a stale token
    for i in range(5):
        await queue.submit("a", i)
    first, second = await queue.claim_many({"a"}, worker_id="w", limit=2)
    commits = store.batches_committed
    # when both are completed (one with a stale token) and up to two more claimed
    outcomes, claimed = await queue.complete_and_claim(
        [(first.id, first.lock_token, "one"), (second.id, "stale", "two")],
        {"a"}, worker_id="w", lease_ms=5_000, limit=2,
    )
    # then each item has complete's outcome and the next two jobs are claimed, in one commit
    assert outcomes[0].status == "completed" and outcomes[0].result == "one"
    assert isinstance(outcomes[1], LockLost)
    assert [j.data for j in claimed] == [2, 3]
    assert all(j.status == "active" and j.worker_id == "w" and j.lock_token for j in claimed)
    assert store.batches_committed == commits + 1
    assert (await queue.get(second.id)).status == "active"


class RecordingRefill:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reserved: list[int] = []
        self.claimed_jobs: list[object] = []

    def reserve(self, items):
        self.reserved.append(len(items))
        return {"names": ["a"], "worker_id": "w", "limit": self.limit}

    def claimed(self, claim, items, outcomes, jobs):
        assert len(outcomes) == len(items)
        self.claimed_jobs += jobs


async def test_a_round_with_a_refill_claims_new_jobs_in_its_transaction(queue):
    # given 3 claimed jobs and 3 waiting
    for i in range(6):
        await queue.submit("a", i)
    jobs = await queue.claim_many({"a"}, limit=3)
    refill = RecordingRefill(limit=3)
    completions = Completions(queue, refill=refill)
    # when all three finish together
    async with trio.open_nursery() as nursery:
        for job in jobs:
            nursery.start_soon(completions.complete, job.id, job.lock_token, None)
    # then one round recorded them and claimed the other three
    assert completions.rounds_written == 1 and refill.reserved == [3]
    assert sorted(j.data for j in refill.claimed_jobs) == [3, 4, 5]
    assert (await queue.stats()).by_status == {**(await queue.stats()).by_status, "completed": 3, "active": 3}


async def test_a_failed_round_with_a_refill_claims_nothing(queue, store):
    await queue.submit("a")
    await queue.submit("a")
    [job] = await queue.claim_many({"a"}, limit=1)
    refill = RecordingRefill(limit=1)
    completions = Completions(queue, refill=refill)
    await store.aclose()
    with pytest.raises(StoreClosed):
        await completions.complete(job.id, job.lock_token, None)
    assert refill.reserved == [1] and refill.claimed_jobs == []


async def test_without_results_a_caller_gets_none_and_refusals_still_raise(queue):
    for i in range(2):
        await queue.submit("a", i)
    good, other = await queue.claim_many({"a"}, limit=2)
    completions = Completions(queue, results=False)
    outcomes: dict[str, object] = {}

    async def complete(name: str, job_id: str, token: str) -> None:
        try:
            outcomes[name] = await completions.complete(job_id, token, "ok")
        except Exception as exc:  # noqa: BLE001 - the test looks at which one
            outcomes[name] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(complete, "good", good.id, good.lock_token)
        nursery.start_soon(complete, "stale", other.id, "stale-token")
    assert outcomes["good"] is None
    assert isinstance(outcomes["stale"], LockLost)
    assert (await queue.get(good.id)).status == "completed"
    assert (await queue.get(other.id)).status == "active"


async def test_completing_what_this_queue_claimed_sees_everything_appended_since(queue, store):
    # given three jobs claimed by this queue: one renewed since, one paused since
    for i in range(3):
        await queue.submit("a", i)
    untouched, renewed, paused = await queue.claim_many({"a"}, worker_id="w", limit=3)
    assert await queue.renew(renewed.id, renewed.lock_token, 60_000)
    await queue.pause(paused.id)
    # when all three are completed (states kept from the claim stand only for an unmoved stream)
    outcomes = await queue.complete_many(
        [(j.id, j.lock_token, j.data) for j in (untouched, renewed, paused)]
    )
    # then the first two are completed from their current state, the paused one is refused
    assert [o.status for o in outcomes[:2]] == ["completed", "completed"]
    assert isinstance(outcomes[2], Exception)
    assert (await queue.get(paused.id)).status == "paused"
    assert outcomes[1].attempts_made == 1 and outcomes[1].result == renewed.data
