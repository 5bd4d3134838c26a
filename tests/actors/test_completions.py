"""Group completion: concurrent completes share one transaction and each caller gets
what `queue.complete` would have given it. A real temp-file store."""

from __future__ import annotations

import pytest
import trio

from gormes.actors.completions import Completions
from gormes.actors.queue import InvalidJob, JobQueue, LockLost
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
