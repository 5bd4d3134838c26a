"""time.now from the injected clock; the job operations against a real JobQueue."""

from __future__ import annotations

import pytest

from ops_helpers import audit_events
from gormes.actors.jobs.state import JobNotFound
from gormes.actors.jobs.queue import JobQueue
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor
from gormes.tools.jobs import JobSummary
from gormes.ops.spec import Caller, InvalidOperationInput, OperationDenied, OperationUnavailable

OPERATOR = Caller(trust="operator", id="cli")
GATEWAY = Caller(trust="gateway", id="gw-1")
NOW = 1_767_225_600.5  # 2026-01-01T00:00:00.500Z


@pytest.fixture
async def queue(store) -> JobQueue:
    return await JobQueue.open(store, clock=lambda: NOW)


@pytest.fixture
def executor(store, queue) -> Executor:
    return Executor(default_registry(), store, jobs=queue, clock=lambda: NOW)


async def test_time_now_reads_the_injected_clock(executor):
    out = await executor.call("time.now", "", Caller(trust="child-agent", id="run-1"))
    assert (out.unix, out.unix_ms, out.iso) == (NOW, 1_767_225_600_500, "2026-01-01T00:00:00.500+00:00")


async def test_time_now_takes_no_arguments(executor):
    with pytest.raises(InvalidOperationInput, match="unknown field `tz`"):
        await executor.call("time.now", {"tz": "UTC"}, GATEWAY)


async def test_job_submit_and_get_go_through_the_queue(executor, queue, store):
    submitted = await executor.call(
        "job.submit", {"name": "echo", "data": {"x": 1}, "options": {"priority": 3}}, GATEWAY
    )
    assert isinstance(submitted, JobSummary)
    assert (submitted.name, submitted.status, submitted.data, submitted.priority) == (
        "echo", "waiting", {"x": 1}, 3,
    )
    stored = await queue.get(submitted.id)
    assert stored is not None and stored.data == {"x": 1}
    got = await executor.call("job.get", {"id": submitted.id}, GATEWAY)
    assert got == submitted
    assert [(e.operation, e.outcome, e.audit_kind) for e in await audit_events(store)] == [
        ("job.submit", "ok", "job.write"), ("job.get", "ok", "job.read"),
    ]


async def test_the_summary_never_carries_the_lock_token(executor, queue):
    submitted = await executor.call("job.submit", {"name": "echo"}, GATEWAY)
    claimed = await queue.claim({"echo"}, worker_id="w1")
    assert claimed.lock_token
    got = await executor.call("job.get", {"id": submitted.id}, GATEWAY)
    assert got.status == "active"
    assert not hasattr(got, "lock_token")


async def test_job_submit_refuses_unknown_options(executor):
    with pytest.raises(InvalidOperationInput, match="unknown field `colour`"):
        await executor.call("job.submit", {"name": "echo", "options": {"colour": "red"}}, GATEWAY)


async def test_job_get_of_an_unknown_job_is_audited_as_invalid(executor, store):
    with pytest.raises(JobNotFound, match="no job nope"):
        await executor.call("job.get", {"id": "nope"}, GATEWAY)
    (event,) = await audit_events(store)
    assert (event.allowed, event.outcome, event.error) == (True, "invalid", "JobNotFound: no job nope")


async def test_job_send_signs_the_message_with_the_caller(executor, queue):
    parent = await executor.call("job.submit", {"name": "parent"}, OPERATOR)
    child = await executor.call(
        "job.submit", {"name": "child", "options": {"parent_id": parent.id}}, OPERATOR
    )
    sent = await executor.call("job.send", {"id": child.id, "payload": "hi"}, OPERATOR)
    assert sent.sender == "operator"
    as_parent = Caller(trust="child-agent", id=f"job-{parent.id}", job_id=parent.id)
    sent = await executor.call("job.send", {"id": child.id, "payload": {"steer": 1}}, as_parent)
    assert sent.sender == parent.id
    assert [(m.sender, m.payload) for m in await queue.inbox(child.id)] == [
        ("operator", "hi"), (parent.id, {"steer": 1}),
    ]


async def test_job_send_from_a_stranger_is_refused_by_the_queue(executor, queue):
    job = await executor.call("job.submit", {"name": "echo"}, OPERATOR)
    stranger = Caller(trust="gateway", id="gw-9")
    with pytest.raises(OperationDenied, match="not 'gw-9'"):  # a refusal, audited denied (0072's addendum)
        await executor.call("job.send", {"id": job.id, "payload": "hi"}, stranger)
    assert await queue.inbox(job.id) == []


async def test_job_cancel_cancels_descendants_and_is_not_for_child_agents_or_strangers(executor, queue):
    parent = await executor.call("job.submit", {"name": "parent"}, OPERATOR)
    child = await executor.call(
        "job.submit", {"name": "child", "options": {"parent_id": parent.id}}, OPERATOR
    )
    with pytest.raises(OperationDenied):
        await executor.call("job.cancel", {"id": parent.id}, Caller(trust="child-agent", id="run-1"))
    assert (await queue.get(parent.id)).status == "waiting-children"
    # Nor for a gateway that did not submit it (it was the operator's).
    with pytest.raises(OperationDenied, match="it is another caller's"):
        await executor.call("job.cancel", {"id": parent.id}, GATEWAY)
    assert (await queue.get(parent.id)).status == "waiting-children"
    out = await executor.call("job.cancel", {"id": parent.id}, OPERATOR)
    assert out.cancelled == [parent.id, child.id]
    assert (await queue.get(child.id)).status == "cancelled"


async def test_without_a_queue_the_job_operations_are_refused(store):
    executor = Executor(default_registry(), store)
    with pytest.raises(OperationUnavailable, match="no job queue is configured"):
        await executor.call("job.get", {"id": "x"}, OPERATOR)
