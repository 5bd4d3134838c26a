"""JobQueue against a real store, with a controlled clock: each test runs on a temp-file
SQLite database and on PostgreSQL (the `store` fixture, tests/actors/jobs/conftest.py)."""

from __future__ import annotations

from collections import Counter

import pytest
import trio

from gormes.actors.jobs.admin import DEFAULT_STALL_GRACE_MS
from gormes.actors.jobs.batch import DEFAULT_LEASE_MS
from gormes.actors.jobs.queue import InvalidJob, InvalidTransition, JobNotFound, JobQueue, LockLost
from gormes.projections import ledger


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

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


def now_ms(clock: Clock) -> int:
    return int(clock() * 1000)


async def test_submit_get_and_list(queue):
    job = await queue.submit("echo", {"x": 1}, {"queue": "q1", "priority": 3})
    got = await queue.get(job.id)
    assert got is not None and got.status == "waiting" and got.data == {"x": 1}
    assert got.queue == "q1" and got.priority == 3 and got.max_attempts == 3
    assert [j.id for j in await queue.list(status="waiting", queue="q1")] == [job.id]
    assert await queue.get("nope") is None


@pytest.mark.parametrize(("name", "data", "options", "message"), [
    ("  ", None, None, "name must not be empty"),
    ("echo", None, {"bogus": 1}, "bogus"),
    ("echo", {"x": object()}, None, "not JSON"),
    ("echo", None, {"max_attempts": 0}, "max_attempts"),
    ("echo", None, {"parent_id": "missing"}, "no parent job"),
])
async def test_bad_submits_are_refused_and_change_nothing(queue, store, name, data, options, message):
    head = await store.head()
    with pytest.raises(InvalidJob, match=message):
        await queue.submit(name, data, options)
    assert await store.head() == head


async def test_claim_by_priority_then_age_only_given_names(queue, clock):
    old = await queue.submit("a", options={"priority": 5})
    clock.advance_ms(1)
    urgent = await queue.submit("a", options={"priority": 1})
    clock.advance_ms(1)
    await queue.submit("b", options={"priority": 0})
    first = await queue.claim({"a"}, worker_id="w")
    second = await queue.claim({"a"}, worker_id="w")
    assert [first.id, second.id] == [urgent.id, old.id]
    assert await queue.claim({"a"}) is None
    assert first.lock_token and first.lock_until == now_ms(clock) + 30_000
    assert first.attempts_started == 1 and first.status == "active"


async def test_claim_respects_queues(queue):
    await queue.submit("a", options={"queue": "slow"})
    assert await queue.claim({"a"}, queues={"fast"}) is None
    assert (await queue.claim({"a"}, queues={"slow"})) is not None


async def test_concurrent_claimers_never_share_a_job(queue):
    ids = {(await queue.submit("work", {"i": i})).id for i in range(200)}
    claimed: list[str] = []

    async def claimer(n: int) -> None:
        while (job := await queue.claim({"work"}, worker_id=f"w{n}")) is not None:
            claimed.append(job.id)
            await queue.complete(job.id, job.lock_token, None)

    async with trio.open_nursery() as nursery:
        for n in range(8):
            nursery.start_soon(claimer, n)
    assert Counter(claimed).most_common(1)[0][1] == 1
    assert set(claimed) == ids
    assert (await queue.stats()).by_status["completed"] == 200


async def test_stale_token_changes_nothing(queue, store, clock):
    await queue.submit("a")
    job = await queue.claim({"a"}, lease_ms=1000)
    clock.advance_ms(20_000)
    assert await queue.sweep_stalled(grace_ms=15_000) == [job.id]
    again = await queue.claim({"a"})
    head = await store.head()
    for write in (
        queue.complete(job.id, job.lock_token, 1),
        queue.fail(job.id, job.lock_token, "x"),
        queue.progress(job.id, job.lock_token, 1),
        queue.add_tokens(job.id, job.lock_token, 1),
        queue.log(job.id, job.lock_token, "hi"),
    ):
        with pytest.raises(LockLost):
            await write
    assert await queue.renew(job.id, job.lock_token) is False
    assert await queue.read_inbox(job.id, job.lock_token) == []
    assert await store.head() == head
    assert (await queue.get(job.id)).lock_token == again.lock_token


async def test_stall_requeues_then_dead_at_max_stalled(queue, clock):
    job = await queue.submit("a", options={"max_stalled": 2})
    await queue.claim({"a"}, lease_ms=100)
    clock.advance_ms(200)
    assert await queue.sweep_stalled(grace_ms=50) == [job.id]
    got = await queue.get(job.id)
    assert got.status == "waiting" and got.stalled_counter == 1 and got.attempts_made == 0
    await queue.claim({"a"}, lease_ms=100)
    clock.advance_ms(200)
    await queue.sweep_stalled(grace_ms=50)
    got = await queue.get(job.id)
    assert got.status == "dead" and got.error == "max stalled count reached"
    assert got.attempts_made == 1


async def test_failure_backoff_then_promotion_then_dead(queue, clock):
    job = await queue.submit("a", options={"max_attempts": 2})
    c = await queue.claim({"a"})
    failed = await queue.fail(c.id, c.lock_token, ValueError("boom"))
    assert failed.status == "delayed" and failed.error == "boom"
    assert failed.delay_until == now_ms(clock) + 1000
    assert await queue.claim({"a"}) is None
    clock.advance_ms(1000)
    assert await queue.promote_delayed() == [job.id]
    c = await queue.claim({"a"})
    dead = await queue.fail(c.id, c.lock_token, "again")
    assert dead.status == "dead" and dead.attempts_made == 2


async def test_delayed_submit_is_claimed_once_due(queue, clock):
    await queue.submit("a", options={"delay_ms": 500})
    assert await queue.claim({"a"}) is None
    clock.advance_ms(500)
    assert (await queue.claim({"a"})) is not None  # claim promotes due jobs itself


async def test_timeouts(queue, clock):
    a = await queue.submit("a", options={"timeout_ms": 1000})
    b = await queue.submit("b", options={"max_attempts": 5})
    ca = await queue.claim({"a"})
    cb = await queue.claim({"b"})
    dead = await queue.time_out(cb.id, cb.lock_token)
    assert dead.status == "dead" and dead.error == "timeout exceeded" and dead.attempts_made == 1
    clock.advance_ms(2001)
    assert await queue.sweep_timeouts() == [a.id]
    assert (await queue.get(ca.id)).status == "dead"
    assert b.id != a.id


async def test_a_long_job_without_a_timeout_lives_while_its_lease_is_renewed(queue, clock):
    """An operator's finding: a healthy agent job with no timeout was killed 2 x lease x
    max_stalled after its claim (5 minutes at the default lease) while its worker
    renewed it."""
    job = await queue.submit("a")
    claimed = await queue.claim({"a"})
    for _ in range(40):  # 40 x 15 s: 10 minutes, twice the old cap
        clock.advance_ms(15_000)
        assert await queue.renew(claimed.id, claimed.lock_token)
        assert await queue.sweep_timeouts() == []
    assert (await queue.get(job.id)).status == "active"
    assert (await queue.complete(claimed.id, claimed.lock_token, "done")).status == "completed"


async def test_a_job_whose_worker_is_gone_is_requeued_not_killed(queue, clock):
    """Its lease lapsed long before its timeout's backstop: the stall sweep's to requeue
    (a worker SIGKILLed and restarted late), not dead "timeout exceeded"."""
    job = await queue.submit("a", options={"timeout_ms": 1000})
    await queue.claim({"a"})
    clock.advance_ms(DEFAULT_LEASE_MS + DEFAULT_STALL_GRACE_MS + 60_000)
    assert await queue.sweep_timeouts() == []
    assert await queue.sweep_stalled() == [job.id]
    again = await queue.get(job.id)
    assert again.status == "waiting" and again.stalled_counter == 1


async def test_release_consumes_no_attempt(queue):
    await queue.submit("a")
    c = await queue.claim({"a"})
    released = await queue.release(c.id, c.lock_token, "shutdown")
    assert released.status == "waiting" and released.attempts_made == 0


async def test_pause_resume_rules(queue):
    job = await queue.submit("a")
    c = await queue.claim({"a"})
    await queue.progress(c.id, c.lock_token, {"step": 2, "total": 5})
    paused = await queue.pause(job.id)
    assert paused.status == "paused" and paused.progress == {"step": 2, "total": 5}
    with pytest.raises(LockLost):
        await queue.complete(c.id, c.lock_token, 1)
    with pytest.raises(InvalidTransition):
        await queue.pause(job.id)
    assert (await queue.resume(job.id)).status == "waiting"
    with pytest.raises(InvalidTransition):
        await queue.resume(job.id)
    with pytest.raises(JobNotFound):
        await queue.pause("missing")


async def test_cancel_cascades_to_non_terminal_descendants(queue):
    root = await queue.submit("p")
    child = await queue.submit("c", options={"parent_id": root.id})
    grandchild = await queue.submit("g", options={"parent_id": child.id})
    done = await queue.submit("d", options={"parent_id": root.id})
    c = await queue.claim({"d"})
    await queue.complete(c.id, c.lock_token, None)
    cancelled = await queue.cancel(root.id)
    assert set(cancelled) == {root.id, child.id, grandchild.id}
    for job_id in cancelled:
        assert (await queue.get(job_id)).status == "cancelled"
    assert (await queue.get(done.id)).status == "completed"
    assert all(m.payload["child_id"] == done.id for m in await queue.inbox(root.id))


async def test_child_done_reaches_parent_inbox_and_parent_resumes(queue):
    parent = await queue.submit("p")
    assert (await queue.get(parent.id)).status == "waiting"
    child = await queue.submit("c", {"n": 1}, {"parent_id": parent.id})
    assert child.depth == 1 and (await queue.get(parent.id)).status == "waiting-children"
    c = await queue.claim({"c"})
    await queue.add_tokens(c.id, c.lock_token, input=10, output=5, cache_read=2)
    await queue.complete(c.id, c.lock_token, {"ok": True})
    p = await queue.get(parent.id)
    assert p.status == "waiting" and p.tokens.input == 10 and p.tokens.cache_read == 2
    holder = await queue.claim({"p"})
    [message] = await queue.read_inbox(parent.id, holder.lock_token)
    assert message.payload == {
        "type": "child_done", "child_id": child.id, "outcome": "complete",
        "result": {"ok": True}, "error": None,
    }
    assert message.read_at is not None
    assert await queue.read_inbox(parent.id, holder.lock_token) == []


async def test_failed_child_fails_parent(queue):
    parent = await queue.submit("p")
    await queue.submit("c", options={"parent_id": parent.id, "max_attempts": 1})
    c = await queue.claim({"c"})
    await queue.fail(c.id, c.lock_token, "kaput")
    p = await queue.get(parent.id)
    assert p.status == "failed" and p.error == f"child job {c.id} failed: kaput"


async def test_depth_cap_and_max_children(store, clock):
    queue = await JobQueue.open(store, clock=clock, max_depth=2)
    a = await queue.submit("x", options={"max_children": 1})
    b = await queue.submit("x", options={"parent_id": a.id})
    with pytest.raises(InvalidJob, match="max_children"):
        await queue.submit("x", options={"parent_id": a.id})
    c = await queue.submit("x", options={"parent_id": b.id})
    with pytest.raises(InvalidJob, match="depth 3"):
        await queue.submit("x", options={"parent_id": c.id})


async def test_inbox_senders_and_terminal_targets(queue):
    parent = await queue.submit("p")
    child = await queue.submit("c", options={"parent_id": parent.id})
    assert (await queue.send(child.id, {"hi": 1}, sender=parent.id)).sender == parent.id
    await queue.send(child.id, "op")
    with pytest.raises(InvalidJob, match="parent or an operator"):
        await queue.send(child.id, 1, sender="someone")
    await queue.cancel(child.id)
    with pytest.raises(InvalidTransition):
        await queue.send(child.id, 1)


async def test_unblock_parents_sweep(queue, store):
    # A parent stranded in waiting-children with no live child (its child_done was
    # written without the settling event, as by a crash of older code) is unblocked.
    from gormes.events.jobs import JobChildAdded, JobChildDone

    parent = await queue.submit("p")
    await store.append(f"job-{parent.id}", [
        JobChildAdded(child_id="ghost", at=1),
        JobChildDone(message_id="m", child_id="ghost", outcome="complete", at=2),
    ], expected_version=1)
    assert (await queue.get(parent.id)).status == "waiting-children"
    assert await queue.unblock_parents() == [parent.id]
    assert (await queue.get(parent.id)).status == "waiting"
    assert await queue.unblock_parents() == []


async def test_transcript_is_capped_in_ledger_but_log_keeps_all(queue, store, monkeypatch):
    monkeypatch.setattr(ledger, "TRANSCRIPT_CAP", 3)
    await queue.submit("a")
    c = await queue.claim({"a"})
    for i in range(5):
        await queue.log(c.id, c.lock_token, f"line {i}")
    assert [e.text for e in await queue.transcript(c.id)] == ["line 2", "line 3", "line 4"]
    stream = await store.read_stream(f"job-{c.id}")
    assert sum(r.type == "job.transcribed" for r in stream) == 5


async def test_retry_and_replay(queue):
    job = await queue.submit("a", {"x": {"y": 1, "z": 2}}, {"priority": 4, "max_attempts": 1})
    c = await queue.claim({"a"})
    await queue.fail(c.id, c.lock_token, "bad")
    retried = await queue.retry(job.id)
    assert retried.status == "waiting" and retried.attempts_made == 0 and retried.error is None
    with pytest.raises(InvalidTransition):
        await queue.replay(job.id)
    c = await queue.claim({"a"})
    await queue.complete(c.id, c.lock_token, 1)
    replayed = await queue.replay(job.id, {"x": {"z": 3}})
    assert replayed.id != job.id and replayed.priority == 4 and replayed.parent_id is None
    assert replayed.data == {"x": {"y": 1, "z": 3}}


async def test_prune_with_dry_run_and_remove_on_complete(queue, clock):
    old = await queue.submit("a")
    c = await queue.claim({"a"})
    await queue.complete(c.id, c.lock_token, 1)
    gone = await queue.submit("a", options={"remove_on_complete": True})
    c = await queue.claim({"a"})
    assert await queue.complete(c.id, c.lock_token, 1) is None
    assert await queue.get(gone.id) is None
    clock.advance_ms(60_000)
    dry = await queue.prune(30_000, dry_run=True)
    assert dry.ids == [old.id] and await queue.get(old.id) is not None
    assert (await queue.prune(30_000)).ids == [old.id]
    assert await queue.get(old.id) is None


async def test_idempotency_key(queue):
    first = await queue.submit("a", options={"idempotency_key": "k"})
    again = await queue.submit("a", options={"idempotency_key": "k"})
    assert again.id == first.id and again.coalesced and not first.coalesced
    await queue.cancel(first.id)
    fresh = await queue.submit("a", options={"idempotency_key": "k"})
    assert fresh.id != first.id and not fresh.coalesced


async def test_concurrent_submits_with_one_key_make_one_job(queue):
    results = []

    async def submit() -> None:
        results.append(await queue.submit("a", options={"idempotency_key": "same"}))

    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(submit)
    assert len({j.id for j in results}) == 1
    assert sum(not j.coalesced for j in results) == 1
    assert len(await queue.list()) == 1


async def test_max_waiting_coalesces_onto_newest_waiting(queue, clock):
    await queue.submit("a", options={"max_waiting": 2})
    clock.advance_ms(1)
    newest = await queue.submit("a", options={"max_waiting": 2})
    third = await queue.submit("a", options={"max_waiting": 2})
    assert third.coalesced and third.id == newest.id


async def test_wait_for_work_wakes_on_submit(queue):
    generation = queue.generation
    assert await queue.claim({"a"}) is None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue.submit, "a")
        with trio.fail_after(5):
            await queue.wait_for_work(generation)
    assert await queue.claim({"a"}) is not None


async def test_rebuilding_the_ledger_gives_identical_rows(queue, store, clock):
    parent = await queue.submit("p", {"deep": [1, 2]})
    await queue.submit("c", options={"parent_id": parent.id})
    await queue.submit("a", options={"delay_ms": 10})
    c = await queue.claim({"c"})
    await queue.progress(c.id, c.lock_token, {"step": 1})
    await queue.log(c.id, c.lock_token, "hello")
    await queue.complete(c.id, c.lock_token, "r")
    await queue.send(parent.id, {"m": 1})
    p = await queue.claim({"p"})
    await queue.read_inbox(parent.id, p.lock_token)

    def dump(tx):
        tx.execute("SELECT 1")
        return {
            t: tx.conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
            for t in ("jobs", "inbox", "transcript")
        }

    before = await store.transact(dump)
    await ledger.rebuild(store)
    assert await store.transact(dump) == before
    assert len(before["jobs"]) == 3 and len(before["inbox"]) == 2


async def test_ledger_catches_up_events_appended_without_it(store, reopen, clock):
    from gormes.events.jobs import JobCancelled

    queue = await JobQueue.open(store, clock=clock)
    job = await queue.submit("a")
    async with reopen(store) as other:  # another process, no ledger installed there
        await other.append(f"job-{job.id}", [JobCancelled(at=1)])
    async with reopen(store) as third:
        queue = await JobQueue.open(third, clock=clock)
        assert (await queue.get(job.id)).status == "cancelled"


async def test_two_stores_claiming_at_once_never_share_a_job(store, reopen, clock):
    """Two processes (on PostgreSQL: two hosts) with a store each claim from one
    ledger: every job is claimed and completed exactly once."""
    queue = await JobQueue.open(store, clock=clock)
    ids = {(await queue.submit("work", {"i": i})).id for i in range(60)}
    claimed: list[str] = []

    async def drain(q: JobQueue, n: int) -> None:
        while jobs := await q.claim_many({"work"}, worker_id=f"w{n}", limit=3):
            for job in jobs:
                claimed.append(job.id)
                await q.complete(job.id, job.lock_token, n)

    async with reopen(store) as other:
        other_queue = await JobQueue.open(other, clock=clock)
        async with trio.open_nursery() as nursery:
            for n in range(3):
                nursery.start_soon(drain, queue, n)
                nursery.start_soon(drain, other_queue, 10 + n)
    assert Counter(claimed).most_common(1)[0][1] == 1
    assert set(claimed) == ids
    assert (await queue.stats()).by_status["completed"] == 60
