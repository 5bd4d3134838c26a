"""A run as a job, run by a real Worker (its tokens reach the job and the job's
parent), and the `runs` projection (rows, and the same rows after a rebuild)."""

from __future__ import annotations

from typing import Any

import trio
from agent_worker import agent_worker
from run_helpers import run_events, wait_until

from gormes.actors.jobs.queue import JobQueue
from gormes.actors.runs.manager import RunManager
from gormes.actors.jobs.worker import WorkerConfig
from gormes.events.jobs import Tokens, job_stream
from gormes.events.runs import RunChildFinished, RunLlmTurn, RunStarted
from gormes.projections.runner import ProjectionRunner
from gormes.projections.runs import COLUMNS, TABLE
from gormes.projections.runs import runs as runs_projection


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


async def test_an_agent_job_runs_on_a_worker_and_its_tokens_roll_up(store, script, workspace, monkeypatch):
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    model = script(
        {"match": "CHILD", "replies": [{"tool_calls": [call("fs.read", path="README.md")]}, {"text": "read it"}]},
        {"replies": [{"tool_calls": [call("agent.spawn", prompt="CHILD read the readme")]}, {"text": "job done"}]},
    )
    queue = await JobQueue.open(store)
    parent = await queue.submit("echo", {"parent": True})
    job = await queue.submit("agent", {"prompt": "summarize", "model": model}, {"parent_id": parent.id})
    worker = agent_worker(queue, WorkerConfig(concurrency=2), store=store, log=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)

        async def done() -> bool:
            return (await queue.get(job.id)).status in ("completed", "failed", "dead")

        await wait_until(done, timeout=10)
        worker.stop()
        await worker.wait_stopped()

    finished = await queue.get(job.id)
    assert finished.status == "completed", finished.error
    run_id = finished.result["run_id"]
    assert finished.result["result"] == "job done"
    events = await run_events(store, run_id)
    # submitted from Python with no submitter: the narrowest class that runs an agent,
    # pinned to the job's own scope (decision 0016), not the worker's "system"
    assert isinstance(events[0], RunStarted) and events[0].job_id == job.id and events[0].trust == "child-agent"
    assert events[0].scope == f"chat:job-{job.id}"
    child = next(e for e in events if isinstance(e, RunChildFinished))
    own = sum((e.usage for e in events if isinstance(e, RunLlmTurn)), Tokens())
    total = own + child.tokens
    assert events[-1].tokens == total
    # the run's and its subagent's usage reached the job...
    assert finished.tokens == total
    # ...and the job's parent, when the job completed
    parent_job = await queue.get(parent.id)
    assert parent_job.tokens == total


async def _rows(store) -> list[tuple[Any, ...]]:
    return await store.read_with(lambda log: log.conn.execute(
        f"SELECT {', '.join(COLUMNS)} FROM {TABLE} ORDER BY run_id").fetchall())


async def test_the_runs_projection_folds_runs_and_rebuilds_to_the_same_rows(store, executor, script):
    model = script(
        {"match": "CHILD", "replies": [{"tool_calls": [call("fs.list", path=".")]}, {"text": "listed"}]},
        {"replies": [{"tool_calls": [call("agent.spawn", prompt="CHILD")]}, {"text": "top"}]},
    )
    async with RunManager.open(store, executor=executor) as runs:
        top = await runs.run("agent", {"prompt": "p"}, model=model)
        failing = await runs.run("agent", {"prompt": "q"}, model=model, max_iterations=1)
    runner = ProjectionRunner(store, runs_projection)
    await runner.catch_up()
    rows = {r[0]: dict(zip(COLUMNS, r)) for r in await _rows(store)}
    assert len(rows) == 4  # two top-level runs, one child each
    row = rows[top.run_id]
    assert (row["status"], row["depth"], row["iterations"], row["handler"]) == ("completed", 0, 2, "agent")
    assert (row["tokens_input"], row["tokens_output"]) == (top.tokens.input, top.tokens.output)
    assert row["model"] == model and row["finished_at"] >= row["started_at"]
    child = next(r for r in rows.values() if r["parent_run_id"] == top.run_id)
    assert (child["depth"], child["last_tool"], child["status"]) == (1, "fs.list", "completed")
    assert rows[failing.run_id]["status"] == "failed"
    assert rows[failing.run_id]["error"] == "max iterations reached"

    before = await _rows(store)
    await runner.rebuild()
    assert await _rows(store) == before


async def test_a_worker_s_agent_jobs_share_one_provider_per_model(store, script, monkeypatch):
    from gormes.providers.scripted import ScriptedProvider

    opened: list[str] = []
    real_open = ScriptedProvider.open.__func__

    def counting_open(cls, path: str, **config):
        opened.append(f"scripted:{path}")
        return real_open(cls, path, **config)

    monkeypatch.setattr(ScriptedProvider, "open", classmethod(counting_open))
    model = script({"replies": [{"text": "done"}]})
    other = script({"replies": [{"text": "done too"}]})
    queue = await JobQueue.open(store)
    jobs = [await queue.submit("agent", {"prompt": f"job {i}", "model": model if i < 5 else other})
            for i in range(7)]
    worker = agent_worker(queue, WorkerConfig(concurrency=3), store=store, log=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)

        async def done() -> bool:
            statuses = [(await queue.get(j.id)).status for j in jobs]
            return all(s in ("completed", "failed", "dead") for s in statuses)

        await wait_until(done, timeout=10)
        worker.stop()
        await worker.wait_stopped()

    results = [(await queue.get(j.id)).result["result"] for j in jobs]
    assert results == ["done"] * 5 + ["done too"] * 2
    # seven jobs, two models: two providers opened, not seven
    assert sorted(opened) == sorted([model, other])


async def test_a_first_attempt_reads_nothing_of_its_jobs_log(store, script, monkeypatch):
    """Only a holder names a run in a job's log or gives it tokens: on a job's first
    claim no earlier attempt has, so the handler does not read the job's stream
    (every agent job starts that way; a later attempt reads it: test_agent_job_resume.py)."""
    read: list[str] = []
    real_read = type(store).read_stream

    async def recording_read(self, stream: str, after_version: int = 0):
        read.append(stream)
        return await real_read(self, stream, after_version)

    monkeypatch.setattr(type(store), "read_stream", recording_read)
    queue = await JobQueue.open(store)
    job = await queue.submit("agent", {"prompt": "hi", "model": script({"replies": [{"text": "done"}]})})
    worker = agent_worker(queue, WorkerConfig(concurrency=1), store=store, log=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)

        async def done() -> bool:
            return (await queue.get(job.id)).status == "completed"

        await wait_until(done, timeout=10)
        worker.stop()
        await worker.wait_stopped()
    assert (await queue.get(job.id)).attempts_started == 1
    assert job_stream(job.id) not in read
