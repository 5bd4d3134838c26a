"""Whom an agent job's runs act for (decision 0016): the job's submitter, on a real
store and a real Worker; resumed attempts narrowed to it."""

from __future__ import annotations

from typing import Any

import msgspec
import trio
from agent_worker import agent_worker
from run_helpers import run_events

import gormes.actors.agent_jobs.handler as agent_job
from gormes.actors.agent_jobs.attempts import last_attempt_run
from gormes.providers.scripted import ScriptedProvider
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.runs.replay import replay
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.jobs.worker import WorkerConfig
from gormes.events.jobs import Submitter, job_stream
from gormes.events.runs import RunCancelled, RunLlmTurn, RunStarted
from gormes.tools.builtin import default_registry as default_ops
from gormes.tools.memory import own_scope

TERMINAL = ("completed", "failed", "dead", "cancelled")


def test_the_identity_comes_from_the_submitter() -> None:
    gateway = Submitter(trust="gateway", caller="mcp:c", scope="chat:mcp-c")
    assert agent_job.run_identity("J", gateway) == agent_job.ActsFor(trust="gateway", scope="chat:mcp-c")
    # a pinned class with no recorded scope: the submitter's own chat
    bare = Submitter(trust="child-agent", caller="run-01X")
    assert agent_job.run_identity("J", bare) == agent_job.ActsFor(trust="child-agent", scope=own_scope("run-01X"))
    operator = Submitter(trust="operator", caller="cli")
    assert agent_job.run_identity("J", operator) == agent_job.ActsFor(trust="operator", scope=None)
    assert agent_job.run_identity("J", None) == agent_job.ActsFor(trust="child-agent", scope="chat:job-J")


async def _until(queue: JobQueue, job_id: str, *wanted: str) -> None:
    while True:
        seen = queue.generation
        if (await queue.get(job_id)).status in wanted:
            return
        await queue.wait_for_work(seen)


async def test_a_system_attempt_of_the_old_code_resumes_narrowed_even_when_its_tools_change(
    store, db_path, script, monkeypatch,
) -> None:
    """A job with no submitter whose first attempt ran as "system" (the old code) and
    no allowlist: the resumed attempt acts as child-agent, whose tools differ from the
    recorded turns'. The recorded prefix is still served (it is history), not
    diverged from, and the run continues live narrowed."""
    model = script({"replies": [
        {"tool_calls": [{"name": "time.now", "arguments": {}}]},
        {"tool_calls": [{"name": "memory.remember", "arguments": {"fact": "x", "scope": "project:default"}}]},
        {"text": "done"},
    ]})
    held, release = trio.Event(), trio.Event()
    original = ScriptedProvider.complete

    async def complete(provider: ScriptedProvider, request: Any) -> Any:
        if sum(m.role == "assistant" for m in request.messages) == 1 and not release.is_set():
            held.set()
            await release.wait()
        return await original(provider, request)

    monkeypatch.setattr(ScriptedProvider, "complete", complete)
    real_identity = agent_job.run_identity
    monkeypatch.setattr(agent_job, "run_identity", lambda job_id, submitter: agent_job.ActsFor(
        trust="system", scope=None))
    queue = await JobQueue.open(store)
    worker = agent_worker(queue, WorkerConfig(concurrency=1), store=store, log=lambda _: None)
    job = await queue.submit("agent", {"prompt": "work", "model": model})
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await held.wait()
        await queue.pause(job.id)
        await _until(queue, job.id, "paused")
        first = last_attempt_run(await store.read_stream(job_stream(job.id)))
        while not isinstance((await run_events(store, first))[-1], RunCancelled):
            await trio.sleep(0.01)
        monkeypatch.setattr(agent_job, "run_identity", real_identity)  # the upgrade
        release.set()
        await queue.resume(job.id)
        await _until(queue, job.id, *TERMINAL)
        worker.stop()

    done = await queue.get(job.id)
    assert done.status == "completed", done.error
    old, new = await run_events(store, first), await run_events(store, done.result["run_id"])
    assert isinstance(old[0], RunStarted) and old[0].trust == "system"
    assert isinstance(new[0], RunStarted) and new[0].resumed_from.run_id == first
    assert (new[0].trust, new[0].scope) == ("child-agent", f"chat:job-{job.id}")
    # the recorded turn was served, not asked again (three turns, one of them copied)
    assert sum(isinstance(e, RunLlmTurn) for e in new) == 3
    (remember,) = [e for e in new if getattr(e, "operation", None) == "memory.remember"]
    assert remember.outcome == "denied"
    # and the continuation replays exactly, with the narrower class's tools
    with DatabaseRuns(db_path) as source:
        report = await replay(source, done.result["run_id"], registry=default_ops())
    assert report.first_divergence is None, report.first_divergence
    assert report.status == "completed"


def test_a_run_started_recorded_before_scopes_were_kept_decodes_with_none() -> None:
    old = (
        b'{"type":"run.started","run_id":"r1","handler":"agent","handler_version":"v","input":null,'
        b'"parent_run_id":null,"depth":0,"deadline_s":null,"tools":null,"model":null,"max_iterations":null,'
        b'"trust":"system","job_id":"j1","forked_from":null,"max_depth":3}'
    )
    started = msgspec.json.decode(old, type=RunStarted)
    assert (started.trust, started.scope, started.process) == ("system", None, None)
