"""A gateway resumes its own agent job parked on an approval nobody has decided.

A gateway may pause and resume its own jobs (`job.resume`), and a job whose run
waits for an approval is parked: paused, its lease released (decision 0033).
Tried: the gateway submits a run whose tool call needs approval, the job parks,
and the gateway resumes it itself before any operator decides. The next attempt
must not take the resume for a decision: the call does not run, the job parks
again on the same request, and the request is still pending for the operator.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

RUNS = str(Path(__file__).resolve().parents[1] / "actors" / "runs")
if RUNS not in sys.path:
    sys.path.insert(0, RUNS)

from agent_worker import agent_worker  # noqa: E402
from run_fixtures import script, workspace  # noqa: E402, F401 (fixtures)
from run_helpers import run_events, wait_until  # noqa: E402

from gormes.actors.jobs.queue import JobQueue  # noqa: E402
from gormes.actors.jobs.worker import WorkerConfig  # noqa: E402
from gormes.actors.runs.approval_book import read_approvals  # noqa: E402
from gormes.events.runs import RunToolCalled  # noqa: E402
from gormes.ops.executor import Executor  # noqa: E402
from gormes.ops.spec import Caller  # noqa: E402
from gormes.tools.builtin import default_registry  # noqa: E402
from gormes.tools.memory import own_scope  # noqa: E402

GATEWAY = Caller(trust="gateway", id="mcp:attacker", scope=own_scope("mcp:attacker"))


async def _pending(store: Any) -> list[Any]:
    return [a for a in (await read_approvals(store)).values() if a.pending]


async def _parks(store: Any, queue: JobQueue, job_id: str, parks: int) -> None:
    """Run a worker until the job has been parked `parks` times in all."""
    async def parked() -> bool:
        job = await queue.get(job_id)
        texts = [e.text for e in await queue.transcript(job_id)]
        return job.status == "paused" and job.lock_token is None and sum(t.startswith("parked:") for t in texts) >= parks

    worker = agent_worker(queue, WorkerConfig(concurrency=1), store=store, log=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(parked, timeout=20)
        worker.stop()
        await worker.wait_stopped()


async def test_a_gateway_resuming_its_parked_job_does_not_approve_the_call(store, script, workspace, monkeypatch):
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    monkeypatch.setenv("GORMES_REQUIRE_APPROVAL", "fs.read")
    model = script({"replies": [{"tool_calls": [{"name": "fs.read", "arguments": {"path": "README.md"}}]},
                                {"text": "read it"}]})
    monkeypatch.setenv("GORMES_GATEWAY_MODELS", model)
    queue = await JobQueue.open(store)
    executor = Executor(default_registry(), store, jobs=queue)
    job = await executor.call("run.submit", {"prompt": "read the README", "model": model, "tools": ["fs.read"]}, GATEWAY)
    await _parks(store, queue, job.id, 1)
    [approval] = await _pending(store)

    resumed = await executor.call("job.resume", {"id": job.id}, GATEWAY)  # its own job: allowed
    assert resumed.status == "waiting"
    await _parks(store, queue, job.id, 2)

    assert [a.request.approval_id for a in await _pending(store)] == [approval.request.approval_id]
    runs = {r.event.run_id for r in await store.read_all(types=["run.started"])}
    ran = [e for run in runs for e in await run_events(store, run)
           if isinstance(e, RunToolCalled) and e.outcome == "ok"]
    assert ran == [], "the gated fs.read ran with no decision"
