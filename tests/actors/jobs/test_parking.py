"""Parking a job (gormes/actors/jobs/parking.py): paused with its lease released
while it waits for a decision, resumed by the decision on its key only; on both
backends (the `store` fixture of this directory)."""

from __future__ import annotations

import pytest

from gormes.actors.jobs.parking import PARKED_ON, park, parked_on, unpark_all_in, unpark_in
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.state import LockLost
from gormes.events.jobs import job_stream


async def _claimed(queue: JobQueue):
    await queue.submit("work", {"n": 1})
    job = await queue.claim({"work"}, worker_id="w1")
    assert job is not None and job.lock_token is not None
    return job


async def test_park_pauses_and_releases_the_lease_and_the_decision_resumes(store) -> None:
    queue = await JobQueue.open(store)
    job = await _claimed(queue)
    assert await park(store, queue.now_ms(), job.id, job.lock_token, on="approval-A",
                      why="waiting for approval A", decided=lambda tx: None) is None
    parked = await queue.get(job.id)
    assert parked.status == "paused" and parked.lock_token is None
    records = await store.read_stream(job_stream(job.id))
    assert parked_on(records) == "approval-A"
    transcript = await queue.transcript(job.id)
    assert transcript[-1].text == "parked: waiting for approval A"
    assert transcript[-1].data == {PARKED_ON: "approval-A"}
    # a decision on another key leaves it parked
    assert await store.transact(lambda tx: unpark_in(tx, queue.now_ms(), job.id, on="approval-B")) is False
    assert (await queue.get(job.id)).status == "paused"
    assert await store.transact(lambda tx: unpark_in(tx, queue.now_ms(), job.id, on="approval-A")) is True
    assert (await queue.get(job.id)).status == "waiting"
    assert parked_on(await store.read_stream(job_stream(job.id))) is None
    # resumed once: a second decision changes nothing
    assert await store.transact(lambda tx: unpark_in(tx, queue.now_ms(), job.id, on="approval-A")) is False
    again = await queue.claim({"work"}, worker_id="w2")
    assert again is not None and again.id == job.id


async def test_a_decision_already_made_parks_nothing(store) -> None:
    queue = await JobQueue.open(store)
    job = await _claimed(queue)
    got = await park(store, queue.now_ms(), job.id, job.lock_token, on="approval-A", why="w",
                     decided=lambda tx: "approved")
    assert got == "approved"
    current = await queue.get(job.id)
    assert current.status == "active" and current.lock_token == job.lock_token


async def test_an_operator_pause_is_not_a_park(store) -> None:
    queue = await JobQueue.open(store)
    job = await _claimed(queue)
    await queue.pause(job.id)
    assert parked_on(await store.read_stream(job_stream(job.id))) is None
    assert await store.transact(lambda tx: unpark_all_in(tx, queue.now_ms(), on="approval-A")) == []
    assert (await queue.get(job.id)).status == "paused"


async def test_a_stale_holder_cannot_park(store) -> None:
    queue = await JobQueue.open(store)
    job = await _claimed(queue)
    with pytest.raises(LockLost):
        await park(store, queue.now_ms(), job.id, "not-the-token", on="k", why="w", decided=lambda tx: None)
    assert (await queue.get(job.id)).status == "active"


async def test_unpark_all_resumes_every_job_parked_on_the_key(store) -> None:
    queue = await JobQueue.open(store)
    ids = []
    for key in ("budget-1", "budget-1", "budget-2"):
        job = await _claimed(queue)
        await park(store, queue.now_ms(), job.id, job.lock_token, on=key, why="cap", decided=lambda tx: None)
        ids.append(job.id)
    resumed = await store.transact(lambda tx: unpark_all_in(tx, queue.now_ms(), on="budget-1"))
    assert sorted(resumed) == sorted(ids[:2])
    assert (await queue.get(ids[2])).status == "paused"
