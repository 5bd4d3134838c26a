"""Per-key concurrency and debounce in the queue (decision 0032), on both backends.

Concurrency: a claim passes over a waiting job whose concurrency key already has
as many jobs held as the job's limit, and takes the jobs behind it; a slot frees
when a held job completes, fails, is released or paused. Debounce: a burst of
submissions with one debounce key becomes one job, with the last data or the list
of them all, that runs once its window passes with no new submission (or at its
max wait). The queue's clock is a plain function the tests move by hand.
"""

from __future__ import annotations

from typing import Any

import pytest

from gormes.actors.jobs.queue import InvalidJob, JobQueue
from gormes.events.jobs import Submitter, job_stream
from gormes.projections import ledger

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


async def open_queue(store: Any) -> tuple[JobQueue, Clock]:
    clock = Clock()
    return await JobQueue.open(store, clock=clock), clock


def keyed(key: str, limit: int | None = None, **more: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"concurrency_key": key, **more}
    if limit is not None:
        options["concurrency_limit"] = limit
    return options


def held_by_key(jobs: list[Any]) -> dict[str | None, int]:
    out: dict[str | None, int] = {}
    for job in jobs:
        out[job.concurrency_key] = out.get(job.concurrency_key, 0) + 1
    return out


# -- per-key concurrency --------------------------------------------------------------


async def test_a_claim_takes_no_more_of_a_key_than_its_limit_and_the_rest_around_it(store):
    queue, _ = await open_queue(store)
    for i in range(5):
        await queue.submit("w", {"a": i}, keyed("A", 2))
    for i in range(3):
        await queue.submit("w", {"b": i}, keyed("B"))  # limit 1 by default
    for i in range(2):
        await queue.submit("w", {"free": i})
    claimed = await queue.claim_many({"w"}, worker_id="w1", limit=100)
    assert held_by_key(claimed) == {"A": 2, "B": 1, None: 2}
    assert {j.concurrency_limit for j in claimed if j.concurrency_key == "B"} == {1}
    # nothing more while they are held, by this worker or another
    assert await queue.claim_many({"w"}, worker_id="w2", limit=100) == []
    # a completion frees one slot of its key: the next job of that key, oldest first
    a = next(j for j in claimed if j.concurrency_key == "A")
    await queue.complete(a.id, a.lock_token, None)
    [next_a] = await queue.claim_many({"w"}, worker_id="w2", limit=100)
    assert next_a.concurrency_key == "A" and next_a.data == {"a": 2}


async def test_jobs_of_a_full_key_ahead_in_line_do_not_hide_the_ones_behind_them(store):
    queue, _ = await open_queue(store)
    first = await queue.submit("w", 0, keyed("hot"))
    for i in range(40):  # older and of higher priority than the others
        await queue.submit("w", i, keyed("hot", priority=-1))
    late = [await queue.submit("w", i, keyed(f"cold{i}")) for i in range(3)]
    free = await queue.submit("w", "free", {"priority": 5})
    [hot] = await queue.claim_many({"w"}, limit=1)
    assert hot.concurrency_key == "hot" and hot.id != first.id  # priority -1 first
    got = await queue.claim_many({"w"}, limit=3)  # one at a time, and in several passes
    assert [j.id for j in got] == [j.id for j in late]
    [last] = await queue.claim_many({"w"}, limit=5)
    assert last.id == free.id
    assert await queue.claim({"w"}) is None


async def test_each_job_is_held_to_its_own_limit(store):
    queue, _ = await open_queue(store)
    wide = [await queue.submit("w", i, keyed("k", 3)) for i in range(2)]
    narrow = await queue.submit("w", "narrow", keyed("k", 2))
    claimed = await queue.claim_many({"w"}, limit=10)
    # two of k are held when the narrow one's turn comes: its limit is reached
    assert [j.id for j in claimed] == [j.id for j in wide]
    another_wide = await queue.submit("w", "wide again", keyed("k", 3))
    [got] = await queue.claim_many({"w"}, limit=10)
    assert got.id == another_wide.id  # passed over the narrow one, which waits
    assert (await queue.get(narrow.id)).status == "waiting"


async def test_a_slot_frees_when_its_job_fails_is_released_or_paused_and_not_before(store):
    queue, clock = await open_queue(store)
    jobs = [await queue.submit("w", i, keyed("k", max_attempts=2)) for i in range(4)]
    held = await queue.claim({"w"})
    assert held.id == jobs[0].id and await queue.claim({"w"}) is None
    await queue.fail(held.id, held.lock_token, "boom")  # delayed for a retry: not held
    nxt = await queue.claim({"w"})
    assert nxt.id == jobs[1].id
    await queue.release(nxt.id, nxt.lock_token, "shutdown")  # back to waiting, first in line
    again = await queue.claim({"w"})
    assert again.id == jobs[1].id
    await queue.pause(again.id)
    third = await queue.claim({"w"})
    assert third.id == jobs[2].id
    # a stalled holder keeps its slot until the sweep takes the job back
    clock.t += 60
    assert await queue.claim({"w"}) is None
    await queue.sweep_stalled(grace_ms=1000)
    taken = await queue.claim({"w"})
    assert taken is not None and taken.concurrency_key == "k"


async def test_a_holder_waiting_for_its_children_still_holds_its_key(store):
    queue, _ = await open_queue(store)
    parent = await queue.submit("p", None, keyed("k"))
    other = await queue.submit("p", None, keyed("k"))
    held = await queue.claim({"p"})
    assert held.id == parent.id
    await queue.submit("child", None, {"parent_id": parent.id})  # still held: waiting-children
    assert (await queue.get(parent.id)).status == "waiting-children"
    assert await queue.claim({"p"}) is None
    await queue.complete(parent.id, held.lock_token, None)  # returns: lock dropped
    [got] = await queue.claim_many({"p"}, limit=5)
    assert got.id == other.id


@pytest.mark.parametrize("options, message", [
    ({"concurrency_key": ""}, "concurrency_key must not be empty"),
    ({"concurrency_key": "  "}, "concurrency_key must not be empty"),
    ({"concurrency_key": "k", "concurrency_limit": 0}, "concurrency_limit must be between 1"),
    ({"concurrency_key": "k", "concurrency_limit": -3}, "concurrency_limit must be between 1"),
    ({"concurrency_limit": 2}, "concurrency_limit needs a concurrency_key"),
    ({"concurrency_key": "k" * 501}, "concurrency_key must be at most 500"),
    ({"debounce_key": "d"}, "a debounce_key needs debounce_ms"),
    ({"debounce_key": "d", "debounce_ms": 0}, "debounce_ms must be between 1"),
    ({"debounce_key": "d", "debounce_ms": -5000}, "debounce_ms must be between 1"),
    ({"debounce_ms": 5000}, "debounce_ms needs a debounce_key"),
    ({"debounce_mode": "merge"}, "debounce_mode needs a debounce_key"),
    ({"debounce_key": "d", "debounce_ms": 5000, "debounce_mode": "first"}, "debounce_mode"),
    ({"debounce_key": "d", "debounce_ms": 5000, "debounce_max_ms": 1000}, "at least debounce_ms"),
    ({"debounce_key": "d", "debounce_ms": 5000, "delay_ms": 10}, "delay_ms cannot be combined"),
    ({"debounce_key": "", "debounce_ms": 5000}, "debounce_key must not be empty"),
])
async def test_bad_keys_and_windows_are_refused_and_nothing_is_written(store, options, message):
    queue, _ = await open_queue(store)
    before = await store.head() if hasattr(store, "head") else None
    with pytest.raises(InvalidJob, match=message):
        await queue.submit("w", None, options)
    assert await queue.list() == []
    if before is not None:
        assert await store.head() == before


async def test_a_child_cannot_be_debounced(store):
    queue, _ = await open_queue(store)
    parent = await queue.submit("p")
    with pytest.raises(InvalidJob, match="child job cannot be debounced"):
        await queue.submit("c", None, {"parent_id": parent.id, "debounce_key": "d", "debounce_ms": 10})
    assert [j.id for j in await queue.list()] == [parent.id]


# -- debounce ----------------------------------------------------------------------


def debounced(mode: str = "last", window_ms: int = 5000, **more: Any) -> dict[str, Any]:
    return {"debounce_key": "user-7", "debounce_ms": window_ms, "debounce_mode": mode, **more}


async def burst(queue: JobQueue, clock: Clock, n: int, options: dict[str, Any],
                step_s: float = 0.1, name: str = "sync") -> list[Any]:
    out = []
    for i in range(n):
        out.append(await queue.submit(name, {"i": i}, options))
        clock.t += step_s
    return out


async def coalesced_events(store: Any, job_id: str) -> list[Any]:
    return [r.event for r in await store.read_stream(job_stream(job_id))
            if r.type == "job.coalesced"]


async def test_a_burst_of_twenty_becomes_one_job_with_the_last_data(store):
    queue, clock = await open_queue(store)
    answers = await burst(queue, clock, 20, debounced("last"))
    job_id = answers[0].id
    assert {a.id for a in answers} == {job_id}
    assert [a.coalesced for a in answers] == [False] + [True] * 19
    job = await queue.get(job_id)
    last_at = int((clock.t - 0.1) * 1000)
    assert (job.status, job.data, job.submissions) == ("delayed", {"i": 19}, 20)
    assert job.delay_until == last_at + 5000  # the window from the last submission
    assert len(await queue.list()) == 1
    events = await coalesced_events(store, job_id)
    assert [e.data for e in events] == [{"i": i} for i in range(1, 20)]
    assert {e.mode for e in events} == {"last"}
    # not before the window has passed with no new submission
    clock.t = last_at / 1000 + 4.9
    assert await queue.claim({"sync"}) is None
    clock.t = last_at / 1000 + 5.0
    claimed = await queue.claim({"sync"})
    assert claimed.id == job_id and claimed.data == {"i": 19}
    await queue.complete(claimed.id, claimed.lock_token, "ok")
    assert await queue.claim({"sync"}) is None  # one job ran, once


async def test_a_burst_of_twenty_merged_is_one_job_with_every_data_in_order(store):
    queue, clock = await open_queue(store)
    answers = await burst(queue, clock, 20, debounced("merge"))
    assert len({a.id for a in answers}) == 1
    assert answers[-1].data == [{"i": i} for i in range(20)]  # the answer shows the job as it is
    clock.t += 5
    claimed = await queue.claim({"sync"})
    assert claimed.data == [{"i": i} for i in range(20)] and claimed.submissions == 20


async def test_after_the_window_a_submission_starts_the_next_job(store):
    queue, clock = await open_queue(store)
    first = await queue.submit("sync", 1, debounced())
    clock.t += 5  # the window is over (promoted or not, it is due)
    second = await queue.submit("sync", 2, debounced())
    assert second.id != first.id and not second.coalesced
    third = await queue.submit("sync", 3, debounced())
    assert third.id == second.id
    claimed = await queue.claim_many({"sync"}, limit=5)
    assert [(j.id, j.data) for j in claimed] == [(first.id, 1)]  # the second is in its window


async def test_the_max_wait_runs_the_job_however_many_follow(store):
    queue, clock = await open_queue(store)
    options = debounced(window_ms=5000, debounce_max_ms=12_000)
    first = await queue.submit("sync", 0, options)
    ids = {first.id}
    for i in range(1, 4):  # every 3 s: each inside the window
        clock.t += 3
        ids.add((await queue.submit("sync", i, options)).id)
    assert ids == {first.id}
    job = await queue.get(first.id)
    assert job.delay_until == first.created_at + 12_000  # capped: not 9 s + 5 s
    clock.t = T0 + 12  # the max wait is up: the job is due, the next submission starts another
    later = await queue.submit("sync", 4, options)
    assert later.id != first.id and not later.coalesced
    claimed = await queue.claim_many({"sync"}, limit=5)
    assert [(j.id, j.data) for j in claimed] == [(first.id, 3)]


async def test_a_debounce_key_is_its_name_and_submitters_own(store):
    queue, _ = await open_queue(store)
    gateway = Submitter(trust="gateway", caller="mcp:a")
    a = await queue.submit("sync", 1, debounced())
    b = await queue.submit("sync", 2, debounced(), submitter=gateway)
    c = await queue.submit("other", 3, debounced())
    d = await queue.submit("sync", 4, {**debounced(), "debounce_key": "user-8"})
    assert len({a.id, b.id, c.id, d.id}) == 4
    again = await queue.submit("sync", 5, debounced(), submitter=gateway)
    assert again.id == b.id and again.coalesced and again.submitter == gateway


async def test_a_started_debounced_job_takes_no_more_submissions(store):
    queue, clock = await open_queue(store)
    first = await queue.submit("sync", 1, debounced(max_attempts=3))
    clock.t += 5
    claimed = await queue.claim({"sync"})
    await queue.fail(claimed.id, claimed.lock_token, "boom")  # delayed again, for its retry
    assert (await queue.get(first.id)).status == "delayed"
    nxt = await queue.submit("sync", 2, debounced())
    assert nxt.id != first.id


async def test_a_paused_debounced_job_takes_no_more_and_a_replay_is_not_debounced(store):
    queue, clock = await open_queue(store)
    first = await queue.submit("sync", 1, debounced("merge"))
    await queue.pause(first.id)
    second = await queue.submit("sync", 2, debounced("merge"))
    assert second.id != first.id
    clock.t += 5
    claimed = await queue.claim({"sync"})
    assert claimed.id == second.id and claimed.data == [2]
    await queue.complete(claimed.id, claimed.lock_token, None)
    replayed = await queue.replay(second.id)
    assert replayed.status == "waiting" and replayed.data == [2] and replayed.debounce_key is None


async def test_the_ledger_of_keys_and_coalesced_jobs_equals_its_rebuild(store):
    queue, clock = await open_queue(store)
    await burst(queue, clock, 7, debounced("merge"))
    await burst(queue, clock, 5, debounced("last", debounce_max_ms=6000), name="other")
    for i in range(4):
        await queue.submit("w", i, keyed("k", 2))
    clock.t += 10
    for job in await queue.claim_many({"w", "sync", "other"}, limit=10):
        await queue.complete(job.id, job.lock_token, {"done": job.data})

    def tables(tx: Any) -> Any:
        return tx.execute("SELECT * FROM jobs ORDER BY id").fetchall()

    live = await store.transact(tables)
    await ledger.rebuild(store)
    assert await store.transact(tables) == live
    assert len(live) == 6
