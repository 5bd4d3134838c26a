"""claim_many and complete_many: many jobs in one transaction, the same rules as
claim and complete one at a time. A real store (SQLite and PostgreSQL: the `store`
fixture, tests/actors/jobs/conftest.py), a fixed clock."""

from __future__ import annotations

from collections import Counter

import pytest
import trio

from gormes.actors.jobs.queue import InvalidJob, JobNotFound, JobQueue, LockLost

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t

    def advance_ms(self, ms: float) -> None:
        self.t += ms / 1000


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def queue(store, clock) -> JobQueue:
    return await JobQueue.open(store, clock=clock, random=lambda: 0.5)


async def test_claim_many_takes_by_priority_then_age_only_given_names_and_queues(queue, clock):
    # given jobs of several priorities, ages, names and queues
    old = await queue.submit("a", options={"priority": 5})
    clock.advance_ms(1)
    urgent = await queue.submit("a", options={"priority": 1})
    clock.advance_ms(1)
    newer = await queue.submit("a", options={"priority": 5})
    await queue.submit("b", options={"priority": 0})
    await queue.submit("a", options={"queue": "other", "priority": 0})
    # when one worker claims up to 10 "a" jobs of the default queue
    jobs = await queue.claim_many({"a"}, {"default"}, worker_id="w", lease_ms=1000, limit=10)
    # then it gets exactly those, in claim order, each with its own lock
    assert [j.id for j in jobs] == [urgent.id, old.id, newer.id]
    assert len({j.lock_token for j in jobs}) == 3
    assert all(j.status == "active" and j.worker_id == "w" for j in jobs)
    now_ms = int(clock() * 1000)
    assert all(j.lock_until == now_ms + 1000 and j.attempts_started == 1 for j in jobs)
    # and the other jobs are still waiting
    assert await queue.claim_many({"a"}, {"default"}, limit=10) == []
    assert (await queue.stats()).by_status["waiting"] == 2


async def test_a_claimed_job_is_exactly_what_its_ledger_row_shows(queue, clock):
    # given jobs with data, options, a parent, tokens and an earlier failed attempt
    retried = await queue.submit("p", {"kind": "retried"}, {"idempotency_key": "k1"})
    [held] = await queue.claim_many({"p"}, limit=1)
    await queue.add_tokens(held.id, held.lock_token, input=3, output=4, cache_read=5)
    await queue.fail(held.id, held.lock_token, "boom")  # delayed by its backoff
    parent = await queue.submit("x", None)
    await queue.submit("c", [1, {"x": None}], {
        "parent_id": parent.id, "priority": 2, "queue": "q2", "max_stalled": 7,
        "timeout_ms": 9000, "max_attempts": 4, "remove_on_fail": True,
    })
    await queue.submit("c", "plain", {"max_children": 3})
    clock.advance_ms(60_000)  # the retry is due
    # when they are claimed
    jobs = await queue.claim_many({"p", "c"}, worker_id="w9", lease_ms=5000, limit=10)
    # then each claimed Job equals its ledger row, field for field
    assert len(jobs) == 3
    for job in jobs:
        assert job == await queue.get(job.id)
    again = next(j for j in jobs if j.id == retried.id)
    assert (again.attempts_made, again.attempts_started, again.error) == (1, 2, "boom")
    assert again.tokens.cache_read == 5


async def test_claim_many_stops_at_its_limit_and_promotes_due_delayed_jobs(queue, clock):
    ids = [(await queue.submit("a", {"i": i})).id for i in range(5)]
    delayed = await queue.submit("a", options={"delay_ms": 10, "priority": -1})
    first = await queue.claim_many({"a"}, limit=2)
    assert [j.id for j in first] == ids[:2]
    clock.advance_ms(10)
    second = await queue.claim_many({"a"}, limit=2)
    assert [j.id for j in second] == [delayed.id, ids[2]]


async def test_claim_many_refuses_bad_arguments_and_claims_nothing_for_no_names(queue):
    await queue.submit("a")
    with pytest.raises(InvalidJob, match="limit"):
        await queue.claim_many({"a"}, limit=0)
    with pytest.raises(InvalidJob, match="lease_ms"):
        await queue.claim_many({"a"}, lease_ms=0, limit=3)
    assert await queue.claim_many(set(), limit=3) == []
    assert await queue.claim_many({"a"}, queues=set(), limit=3) == []
    assert (await queue.stats()).by_status["waiting"] == 1


async def test_concurrent_claim_many_and_claim_never_share_a_job(queue):
    # given 300 jobs and claimers sharing group commits, some batched, some not
    ids = {(await queue.submit("work", {"i": i})).id for i in range(300)}
    claimed: list[str] = []

    async def batch_claimer(n: int, limit: int) -> None:
        while jobs := await queue.claim_many({"work"}, worker_id=f"b{n}", limit=limit):
            claimed.extend(j.id for j in jobs)
            outcomes = await queue.complete_many([(j.id, j.lock_token, n) for j in jobs])
            assert all(o is not None and o.status == "completed" for o in outcomes)

    async def single_claimer(n: int) -> None:
        while (job := await queue.claim({"work"}, worker_id=f"s{n}")) is not None:
            claimed.append(job.id)
            await queue.complete(job.id, job.lock_token, None)

    async with trio.open_nursery() as nursery:
        for n, limit in enumerate((1, 2, 7, 16, 64, 5)):
            nursery.start_soon(batch_claimer, n, limit)
        for n in range(3):
            nursery.start_soon(single_claimer, n)
    # then every job was claimed exactly once and completed
    assert Counter(claimed).most_common(1)[0][1] == 1
    assert set(claimed) == ids
    assert (await queue.stats()).by_status["completed"] == 300


async def test_complete_many_gives_each_item_the_outcome_complete_would(queue, store):
    # given four claimed jobs, one of them removed on completion
    for options in ({}, {}, {}, {"remove_on_complete": True}):
        await queue.submit("a", options=options)
    a, b, c, gone = await queue.claim_many({"a"}, limit=4)
    # when one batch mixes good items with a stale token, an unknown job, a result
    # that is not JSON and the same job twice
    outcomes = await queue.complete_many([
        (a.id, a.lock_token, {"r": 1}),
        (b.id, "not-the-token", 2),
        ("no-such-job", "t", 3),
        (c.id, c.lock_token, {"bad": object()}),
        (gone.id, gone.lock_token, 4),
        (a.id, a.lock_token, 5),
    ])
    # then each item has its own outcome and the refused ones changed nothing
    done, stale, unknown, not_json, removed, twice = outcomes
    assert done.id == a.id and done.status == "completed" and done.result == {"r": 1}
    assert isinstance(stale, LockLost)
    assert isinstance(unknown, JobNotFound)
    assert isinstance(not_json, InvalidJob) and "not JSON" in str(not_json)
    assert removed is None and await queue.get(gone.id) is None
    assert isinstance(twice, LockLost)
    assert (await queue.get(a.id)).result == {"r": 1}
    for job in (b, c):
        still = await queue.get(job.id)
        assert still.status == "active" and still.lock_token == job.lock_token
    assert [r.event.type for r in await store.read_stream(f"job-{b.id}")] == [
        "job.submitted", "job.claimed"
    ]


async def test_complete_many_after_a_stall_is_fenced(queue, clock):
    # given a job whose lease expired and that another worker claimed again
    await queue.submit("a")
    [stale] = await queue.claim_many({"a"}, lease_ms=1000, limit=5)
    clock.advance_ms(20_000)
    assert await queue.sweep_stalled(grace_ms=15_000) == [stale.id]
    [fresh] = await queue.claim_many({"a"}, limit=5)
    # when both holders complete it in one batch
    outcomes = await queue.complete_many([
        (stale.id, stale.lock_token, "old"), (fresh.id, fresh.lock_token, "new"),
    ])
    # then only the current holder's completion counts
    assert isinstance(outcomes[0], LockLost)
    assert outcomes[1].status == "completed" and outcomes[1].result == "new"
    assert outcomes[1].attempts_made == 1


async def test_complete_many_of_children_reaches_their_parent(queue):
    parent = await queue.submit("p")
    for _ in range(2):
        await queue.submit("c", options={"parent_id": parent.id})
    children = await queue.claim_many({"c"}, limit=5)
    await queue.complete_many([(j.id, j.lock_token, j.id) for j in children])
    after = await queue.get(parent.id)
    assert after.status == "waiting" and after.live_children == 0
    messages = await queue.inbox(parent.id)
    assert sorted(m.payload["child_id"] for m in messages) == sorted(j.id for j in children)
    assert all(m.payload["outcome"] == "complete" for m in messages)
