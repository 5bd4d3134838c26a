"""Approval gates in an agent job (decision 0033), on a real store and a real
Worker: the run asks, its job is parked (paused, lease released, the attempt's
run cancelled: no worker held); the decision resumes the job and its next attempt
resumes the run from its record, serves the recorded request, reads the decision
and goes on; the tool ran once; both runs replay exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from agent_worker import agent_worker
from run_helpers import run_events, wait_until

from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.worker import WorkerConfig
from gormes.actors.runs.approval_book import expire_due, read_approvals
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.events.approvals import RunApprovalDecided, RunApprovalRequested
from gormes.events.jobs import JobTranscribed, job_stream
from gormes.events.runs import RunCancelled, RunCompleted, RunToolCalled
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller
from gormes.tools.builtin import default_registry

OPERATOR = Caller(trust="operator", id="cli")


def call(tool: str, **arguments: Any) -> dict:
    return {"name": tool, "arguments": arguments}


async def _job_runs(store: Any, job_id: str) -> list[str]:
    return [r.event.entry.data["agent_run"] for r in await store.read_stream(job_stream(job_id))
            if isinstance(r.event, JobTranscribed) and isinstance(r.event.entry.data, dict)
            and "agent_run" in r.event.entry.data]


async def _status(queue: JobQueue, job_id: str, *statuses: str) -> bool:
    job = await queue.get(job_id)
    return job is not None and job.status in statuses


async def _pending(store: Any) -> list[Any]:
    return [a for a in (await read_approvals(store)).values() if a.pending]


async def _ended(store: Any, run_id: str) -> bool:
    return any(isinstance(e, RunCancelled) for e in await run_events(store, run_id))


def _no_active(worker: Any) -> Any:
    async def check() -> bool:
        return not worker.active
    return check


async def _replays_exactly(db_path: Path, run_id: str) -> None:
    with DatabaseRuns(db_path) as source:
        report = await replay(source, run_id, registry=default_registry())
    assert report.first_divergence is None, report.first_divergence


async def _parked_job(store: Any, queue: JobQueue, model: str) -> tuple[Any, Any]:
    """Submit an agent job, run a worker until it is parked on its approval: (job, approval)."""
    job = await queue.submit("agent", {"prompt": "work", "model": model, "tools": ["fs.read"]})
    worker = agent_worker(queue, WorkerConfig(concurrency=1), store=store, log=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _status(queue, job.id, "paused"), timeout=10)
        [first] = await _job_runs(store, job.id)
        await wait_until(lambda: _ended(store, first), timeout=10)
        # the slot is freed: nothing holds the job (the worker lets go of it
        # just after the run's cancel commits, so wait for that, do not race it)
        await wait_until(_no_active(worker), timeout=10)
        worker.stop()
        await worker.wait_stopped()
    parked = await queue.get(job.id)
    assert parked.lock_token is None
    [approval] = await _pending(store)
    assert approval.request.job_id == job.id and approval.request.operation == "fs.read"
    transcript = await queue.transcript(job.id)
    assert any(e.text.startswith(f"parked: waiting for approval {approval.request.approval_id}") for e in transcript)
    return job, approval


async def _finish(store: Any, queue: JobQueue, job_id: str) -> Any:
    worker = agent_worker(queue, WorkerConfig(concurrency=1), store=store, log=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _status(queue, job_id, "completed", "failed", "dead"), timeout=10)
        worker.stop()
        await worker.wait_stopped()
    return await queue.get(job_id)


async def test_an_approved_call_in_a_parked_job_runs_once_after_the_job_resumes(
    store, db_path, script, workspace, monkeypatch,
) -> None:
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    monkeypatch.setenv("GORMES_REQUIRE_APPROVAL", "fs.read")
    model = script({"replies": [{"tool_calls": [call("fs.read", path="README.md")]}, {"text": "all done"}]})
    queue = await JobQueue.open(store)
    job, approval = await _parked_job(store, queue, model)
    approval_id = approval.request.approval_id

    decided = await Executor(default_registry(), store).call(
        "approval.approve", {"id": approval_id, "reason": "fine"}, OPERATOR)
    assert decided.status == "approved" and decided.resumed_job == job.id
    assert await _status(queue, job.id, "waiting")

    finished = await _finish(store, queue, job.id)
    assert finished.status == "completed", finished.error
    assert finished.result["result"] == "all done"
    first, second = await _job_runs(store, job.id)
    assert finished.result["run_id"] == second
    events = await run_events(store, second)
    kinds = [type(e).__name__ for e in events if hasattr(e, "seq") and type(e).__name__ != "RunInboxRead"]
    assert kinds[:4] == ["RunLlmTurn", "RunApprovalRequested", "RunApprovalDecided", "RunToolCalled"]
    [asked] = [e for e in events if isinstance(e, RunApprovalRequested)]
    [served] = [e for e in events if isinstance(e, RunApprovalDecided)]
    assert asked.approval_id == served.approval_id == approval_id  # asked once, never again
    assert (served.decision, served.reason) == ("approved", "fine")
    assert isinstance(events[-1], RunCompleted)
    audits = [r.event for r in await store.read_all(types=["audit.operation"])]
    assert sum(1 for a in audits if a.operation == "fs.read" and a.outcome == "ok") == 1
    assert sum(1 for a in audits if a.operation == "approval.request") == 1
    assert len(await read_approvals(store)) == 1
    await _replays_exactly(db_path, first)
    await _replays_exactly(db_path, second)


async def test_a_denied_call_in_a_parked_job_is_a_denied_tool_call(store, db_path, script, workspace, monkeypatch) -> None:
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    monkeypatch.setenv("GORMES_REQUIRE_APPROVAL", "fs.*")
    model = script({"replies": [{"tool_calls": [call("fs.read", path="README.md")]}, {"text": "could not read"}]})
    queue = await JobQueue.open(store)
    job, approval = await _parked_job(store, queue, model)
    await Executor(default_registry(), store).call(
        "approval.deny", {"id": approval.request.approval_id, "reason": "no"}, OPERATOR)
    finished = await _finish(store, queue, job.id)
    assert finished.status == "completed", finished.error
    _, second = await _job_runs(store, job.id)
    [tool] = [e for e in await run_events(store, second) if isinstance(e, RunToolCalled)]
    assert tool.outcome == "denied" and tool.error.endswith("denied by operator:cli: no")
    await _replays_exactly(db_path, second)


async def test_the_timeout_sweep_times_out_a_parked_request_and_resumes_its_job(
    store, db_path, script, workspace, monkeypatch,
) -> None:
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    monkeypatch.setenv("GORMES_REQUIRE_APPROVAL", "fs.read")
    monkeypatch.setenv("GORMES_APPROVAL_TIMEOUT", "3600")
    model = script({"replies": [{"tool_calls": [call("fs.read", path="README.md")]}, {"text": "gave up"}]})
    queue = await JobQueue.open(store)
    job, approval = await _parked_job(store, queue, model)
    assert await expire_due(store, approval.request.at + 1000) == []  # not due yet: nothing written
    [timed_out] = await expire_due(store, approval.request.expires_at)
    assert timed_out.decision == "timed_out" and timed_out.resumed_job == job.id
    finished = await _finish(store, queue, job.id)
    assert finished.status == "completed", finished.error
    _, second = await _job_runs(store, job.id)
    events = await run_events(store, second)
    [served] = [e for e in events if isinstance(e, RunApprovalDecided)]
    assert (served.decision, served.on_timeout) == ("timed_out", "deny")
    assert [e.outcome for e in events if isinstance(e, RunToolCalled)] == ["denied"]
    await _replays_exactly(db_path, second)


async def test_a_subagents_gated_call_parks_the_job_and_the_resumed_tree_runs_it_once(
    store, db_path, script, workspace, monkeypatch,
) -> None:
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    monkeypatch.setenv("GORMES_REQUIRE_APPROVAL", "fs.read")
    model = script(
        {"match": "CHILD", "replies": [{"tool_calls": [call("fs.read", path="README.md")]}, {"text": "child read it"}]},
        {"replies": [{"tool_calls": [call("agent.spawn", prompt="CHILD read the readme")]}, {"text": "parent done"}]},
    )
    queue = await JobQueue.open(store)
    job, approval = await _parked_job(store, queue, model)  # the job's slot and lease are free
    child_run = approval.request.run_id
    first, = await _job_runs(store, job.id)
    assert child_run != first  # the subagent asked, and its root's job was parked

    await Executor(default_registry(), store).call(
        "approval.approve", {"id": approval.request.approval_id, "reason": "fine"}, OPERATOR)
    finished = await _finish(store, queue, job.id)
    assert finished.status == "completed", finished.error
    assert finished.result["result"] == "parent done"
    audits = [r.event for r in await store.read_all(types=["audit.operation"])]
    assert sum(1 for a in audits if a.operation == "fs.read" and a.outcome == "ok") == 1  # run once
    assert sum(1 for a in audits if a.operation == "approval.request") == 1  # asked once
    _, second = await _job_runs(store, job.id)
    await _replays_exactly(db_path, first)
    await _replays_exactly(db_path, second)
