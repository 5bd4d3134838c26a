"""Job options have bounds (every time computed from them fits a 64-bit column),
checked however the options are made, and a backoff never grows past them."""

from __future__ import annotations

import pytest

from gormes.actors.jobs import rules
from gormes.actors.jobs.queue import InvalidJob, JobQueue, Submitter
from gormes.events.jobs import MAX_DELAY_MS, Backoff, JobOptions


@pytest.mark.parametrize("options", [
    {"priority": -(2**31) - 1}, {"priority": 2**31}, {"max_attempts": 0}, {"max_attempts": 1001},
    {"delay_ms": -1}, {"delay_ms": MAX_DELAY_MS + 1}, {"timeout_ms": 0}, {"timeout_ms": 2**63},
    {"backoff": {"delay_ms": MAX_DELAY_MS + 1}}, {"backoff": {"jitter": 1.5}},
    {"max_children": -1}, {"max_waiting": 0}, {"queue": "q" * 201}, {"idempotency_key": "k" * 501},
])
async def test_options_out_of_range_are_refused_and_change_nothing(store, options):
    queue = await JobQueue.open(store)
    head = await store.head()
    with pytest.raises(InvalidJob, match="invalid job options"):
        await queue.submit("echo", None, options)
    assert await store.head() == head


def test_options_made_in_python_are_checked_too():
    with pytest.raises(InvalidJob, match="priority"):
        rules.validate_options(JobOptions(priority=10**30))
    with pytest.raises(InvalidJob, match="delay_ms"):
        rules.validate_options(JobOptions(backoff=Backoff(delay_ms=10**30)))
    assert rules.validate_options(JobOptions(priority=-(2**31), max_attempts=1000)).max_attempts == 1000


@pytest.mark.parametrize("kind", ["exponential", "fixed"])
def test_a_backoff_never_passes_the_delay_bound(kind):
    backoff = Backoff(kind=kind, delay_ms=MAX_DELAY_MS, jitter=1.0)
    for attempts in (1, 2, 64, 999):
        for draw in (0.0, 0.5, 0.999):
            assert 0 <= rules.backoff_ms(backoff, attempts, draw) <= MAX_DELAY_MS
    small = Backoff(kind=kind, delay_ms=1000, jitter=0.0)
    assert rules.backoff_ms(small, 3, 0.5) == (4000 if kind == "exponential" else 1000)


async def test_live_count_counts_a_trust_classs_unfinished_jobs(store):
    queue = await JobQueue.open(store)
    one = Submitter(trust="gateway", caller="mcp:a", scope="chat:mcp-a")
    other = Submitter(trust="gateway", caller="mcp:b", scope="chat:mcp-b")  # another name, the same class
    child = Submitter(trust="child-agent", caller="run:r1", scope="project:default")
    jobs = [await queue.submit("echo", n, submitter=one) for n in range(3)]
    await queue.submit("echo", None, submitter=other)
    await queue.submit("echo", None, submitter=child)
    await queue.submit("echo", None)
    await queue.cancel(jobs[0].id)
    assert await queue.live_count("gateway") == 3
    assert await queue.live_count("child-agent") == 1
    assert await queue.live_count("operator") == 0  # a job with no submitter is no class's
