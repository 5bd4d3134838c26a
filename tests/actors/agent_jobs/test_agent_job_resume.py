"""Resuming an agent job's run on a later attempt (decision 0011), on a real store
and a real Worker: the earlier attempt's recorded prefix is replayed (no provider
call, no tool side effect, no tokens counted again), then the run goes live."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec

import trio
from agent_worker import agent_worker
from run_helpers import run_events, wait_until

from gormes.actors.agent_jobs.attempts import last_attempt_run
from gormes.actors.agent_jobs.handler import agent_job
from gormes.actors.jobs.context import JobContext
from gormes.providers.scripted import ScriptedProvider
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.runs.replay import replay
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.jobs.worker import WorkerConfig
from gormes.events.jobs import JobTranscribed, Tokens, job_stream
from gormes.events.runs import (
    RunCancelled,
    RunChildSpawned,
    RunCompleted,
    RunLlmCut,
    RunLlmTurn,
    RunStarted,
    RunToolCalled,
)
from gormes.tools.builtin import default_registry as default_ops


def call(tool: str, **arguments: Any) -> dict:
    return {"name": tool, "arguments": arguments}


class ProviderCalls:
    """Wraps the real scripted provider: counts the turns it answered, and can hold
    one turn until released (so a test can pause the job while the run waits)."""

    def __init__(
        self, monkeypatch: Any, hold_turn: int | None = None, *, child_hold: bool = False,
        child_turn: int | None = None, hold_text: str | None = None,
    ) -> None:
        self.answered: list[int] = []
        self.child_answered: list[int] = []  # turns answered to a conversation opening with CHILD
        self.spent = Tokens()  # the usage of every reply the provider gave
        self.held = trio.Event()
        self.release = trio.Event()
        original = ScriptedProvider.complete
        calls = self

        async def complete(provider: ScriptedProvider, request: Any) -> Any:
            turn = sum(1 for m in request.messages if m.role == "assistant")
            child = any(m.role == "user" and "CHILD" in (m.content or "") for m in request.messages[:2])
            hold = (child and child_turn in (None, turn)) if child_hold else (not child and turn == hold_turn)
            if hold_text is not None:  # only the conversation opening with this text is held
                hold = hold and any(hold_text in (m.content or "") for m in request.messages[:2])
            if hold and not calls.release.is_set():
                calls.held.set()
                await calls.release.wait()
            reply = await original(provider, request)
            (calls.child_answered if child else calls.answered).append(turn)
            u = reply.usage
            calls.spent = calls.spent + Tokens(input=u.input, output=u.output, cache_read=u.cache_read)
            return reply

        monkeypatch.setattr(ScriptedProvider, "complete", complete)


async def _job_runs(store: Any, job_id: str) -> list[str]:
    records = await store.read_stream(job_stream(job_id))
    return [r.event.entry.data["agent_run"] for r in records
            if isinstance(r.event, JobTranscribed) and isinstance(r.event.entry.data, dict)
            and "agent_run" in r.event.entry.data]


async def _executions(store: Any, operation: str) -> int:
    """How many times the executor ran `operation` to success (its audit events)."""
    audits = await store.read_all(types=["audit.operation"])
    return sum(1 for r in audits if r.event.operation == operation and r.event.outcome == "ok")


async def _replays_exactly(db_path: Path, run_id: str) -> Any:
    with DatabaseRuns(db_path) as source:
        report = await replay(source, run_id, registry=default_ops())
    assert report.first_divergence is None, report.first_divergence
    assert report.tree_exact
    return report


async def test_a_paused_agent_job_resumes_its_run_instead_of_starting_over(
    store, db_path, script, workspace, monkeypatch,
) -> None:
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    model = script({"replies": [
        # the side effect: a fact remembered (each execution is audited)
        {"tool_calls": [call("memory.remember", fact="resume replays the prefix")]},
        {"tool_calls": [call("fs.read", path="README.md")]},
        {"text": "all done"},
    ]})
    provider = ProviderCalls(monkeypatch, hold_turn=1)  # the attempt waits in its second turn
    queue = await JobQueue.open(store)
    # paused after the first tool call, in the next model turn: that turn is cancelled, not answered
    job, finished = await _pause_while_held_then_resume(store, queue, provider, model)

    assert finished.status == "completed", finished.error
    assert finished.result["result"] == "all done"
    first, second = await _job_runs(store, job.id)
    assert finished.result["run_id"] == second

    # the provider answered each turn once: turn 0 in the first attempt, 1 and 2 after
    assert provider.answered == [0, 1, 2]
    # the tool's side effect happened once
    assert await _executions(store, "memory.remember") == 1

    earlier = await run_events(store, first)
    assert isinstance(earlier[-1], RunCancelled) and earlier[-1].reason == "job paused"
    assert [type(e) for e in earlier if isinstance(e, (RunLlmTurn, RunToolCalled))] == [RunLlmTurn, RunToolCalled]
    later_records = await store.read_stream(f"run-{second}")
    later = [r.event for r in later_records]
    started = later[0]
    assert isinstance(started, RunStarted) and started.job_id == job.id and started.forked_from is None
    first_records = await store.read_stream(f"run-{first}")
    assert started.resumed_from.run_id == first
    # the last observation (the turn the pause cut is recorded after it, and not copied)
    assert started.resumed_from.position == [r for r in first_records if hasattr(r.event, "seq")][-1].position
    assert isinstance(first_records[-2].event, RunLlmCut) and first_records[-2].event.usage is None
    copied = [e for e in earlier if hasattr(e, "seq")]
    assert later[1 : 1 + len(copied)] == copied  # the prefix, copied as recorded
    assert sum(isinstance(e, RunToolCalled) and e.operation == "memory.remember" for e in later) == 1

    # tokens: the job counted each turn once; the continuation's total is the whole run's
    turns = [e.usage for e in later if isinstance(e, RunLlmTurn)]
    assert len(turns) == 3
    total = sum(turns, Tokens())
    assert isinstance(later[-1], RunCompleted) and later[-1].tokens == total
    assert finished.tokens == total

    # `runs show` says where the continuation came from
    from gormes.actors.runs.timeline import format_view, run_view

    view = await run_view(store, second, tree=True)
    assert view["resumed_from"] == {"run_id": first, "position": started.resumed_from.position}
    assert view["forked_from"] is None and view["status"] == "completed" and view["iterations"] == 3
    assert f"resumes run {first}" in "\n".join(format_view(view))

    # both runs replay exactly: the earlier one to its cancellation, the continuation to its end
    assert (await _replays_exactly(db_path, first)).status == "cancelled"
    assert (await _replays_exactly(db_path, second)).status == "completed"


async def test_a_run_that_completed_before_its_job_did_is_the_jobs_result(
    store, db_path, script, workspace, monkeypatch,
) -> None:
    """The attempt's run completed, then the worker died before recording the job's
    completion: the next attempt completes the job with that run's result and
    starts no run (no provider call, no tool call again)."""
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    model = script({"replies": [
        {"tool_calls": [call("memory.remember", fact="finished once")]},
        {"text": "finished once"},
    ]})
    provider = ProviderCalls(monkeypatch)
    queue = await JobQueue.open(store)
    job = await queue.submit("agent", {"prompt": "work", "model": model})
    # the first attempt: the real handler on a claimed job, whose completion is never recorded
    claimed = await queue.claim(["agent"], worker_id="dies-after-the-handler")
    assert claimed is not None and claimed.id == job.id
    first = await agent_job(JobContext(queue, claimed), claimed.data)
    await queue.release(job.id, claimed.lock_token, "worker died")
    assert provider.answered == [0, 1]

    async with _worker_until_ended(store, queue, job.id):
        pass
    finished = await queue.get(job.id)
    assert finished.status == "completed", finished.error
    assert finished.result == first == {"run_id": first["run_id"], "result": "finished once"}
    assert provider.answered == [0, 1]  # nothing asked again
    assert await _executions(store, "memory.remember") == 1
    assert await _job_runs(store, job.id) == [first["run_id"]]  # no second run
    turns = [e.usage for e in await run_events(store, first["run_id"]) if isinstance(e, RunLlmTurn)]
    assert finished.tokens == sum(turns, Tokens())
    await _replays_exactly(db_path, first["run_id"])


async def _status_in(queue: JobQueue, job_id: str, *wanted: str) -> bool:
    return (await queue.get(job_id)).status in wanted


async def _pause_while_held_then_resume(
    store: Any, queue: JobQueue, provider: ProviderCalls, model: str,
    before_pause: Callable[[], Awaitable[bool]] | None = None,
) -> Any:
    """Submit an agent job, pause it while the provider holds its turn (and, given
    `before_pause`, once that is true), wait for the attempt's run to end cancelled,
    release and resume it: (job, finished job)."""
    job = await queue.submit("agent", {"prompt": "work", "model": model})
    async with _worker_until_ended(store, queue, job.id):
        with trio.fail_after(10):
            await provider.held.wait()
        if before_pause is not None:
            await wait_until(before_pause, timeout=10)
        await queue.pause(job.id)
        await wait_until(lambda: _status_in(queue, job.id, "paused"), timeout=10)
        await wait_until(lambda: _attempt_ended(store, job.id), timeout=10)
        provider.release.set()
        await queue.resume(job.id)
    return job, await queue.get(job.id)


@asynccontextmanager
async def _worker_until_ended(store: Any, queue: JobQueue, job_id: str) -> AsyncIterator[None]:
    """A one-slot worker runs while the body steers the job; leaving waits until the
    job has ended, then stops the worker."""
    worker = agent_worker(queue, WorkerConfig(concurrency=1), store=store, log=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        yield
        await wait_until(lambda: _status_in(queue, job_id, "completed", "failed", "dead"), timeout=10)
        worker.stop()
        await worker.wait_stopped()


async def test_a_failed_run_is_retried_afresh(store, script, workspace, monkeypatch) -> None:
    """A run that failed (its handler's own failure) is not resumed: the retry is a
    fresh run, which asks the model again."""
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    model = script({"replies": [{"tool_calls": [call("fs.read", path="README.md")]}, {"text": "done"}]})
    provider = ProviderCalls(monkeypatch)
    queue = await JobQueue.open(store)
    job = await queue.submit("agent", {"prompt": "work", "model": model, "max_iterations": 1},
                             {"max_attempts": 2, "backoff": {"kind": "fixed", "delay_ms": 1}})
    async with _worker_until_ended(store, queue, job.id):
        pass
    runs = await _job_runs(store, job.id)
    assert len(runs) == 2
    for run_id in runs:
        started = (await run_events(store, run_id))[0]
        assert started.resumed_from is None
    assert provider.answered == [0, 0]


def test_the_last_attempt_run_is_read_from_the_jobs_log() -> None:
    from gormes.events.base import Recorded
    from gormes.events.jobs import TranscriptEntry

    def entry(data: Any) -> Recorded:
        return Recorded(1, "job-j", 1, "job.transcribed", JobTranscribed(entry=TranscriptEntry(text="x", data=data), at=0), 0.0)

    assert last_attempt_run([]) is None
    assert last_attempt_run([entry({"agent_run": "a"}), entry(None), entry({"agent_run": "b"}), entry([1])]) == "b"


async def test_a_child_still_running_when_the_job_paused_is_resumed_with_its_parent(
    store, db_path, script, workspace, monkeypatch,
) -> None:
    """The continuation replays the parent up to the spawn of the child that had not
    finished; when its code spawns that child again, the child is resumed in turn: a
    new child run with `resumed_from` that replays the earlier child's work (its
    model turn, its tool's side effect) instead of doing it again."""
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    model = script(
        {"match": "CHILD", "replies": [
            {"tool_calls": [call("memory.remember", fact="the child's step")]},
            {"text": "child answer"},
        ]},
        {"replies": [
            {"tool_calls": [call("agent.spawn", prompt="CHILD help")]},
            {"text": "parent done"},
        ]},
    )
    provider = ProviderCalls(monkeypatch, child_hold=True, child_turn=1)  # the child waits in its 2nd turn
    queue = await JobQueue.open(store)
    job, finished = await _pause_while_held_then_resume(store, queue, provider, model)
    assert finished.status == "completed", finished.error
    assert finished.result["result"] == "parent done"
    first, second = await _job_runs(store, job.id)
    (old_child,) = [e.child_run_id for e in await run_events(store, first) if isinstance(e, RunChildSpawned)]
    (new_child,) = [e.child_run_id for e in await run_events(store, second) if isinstance(e, RunChildSpawned)]
    assert isinstance((await run_events(store, old_child))[-1], RunCancelled)
    later_child = await run_events(store, new_child)
    assert later_child[0].resumed_from is not None and later_child[0].resumed_from.run_id == old_child
    assert later_child[0].parent_run_id == second
    assert isinstance(later_child[-1], RunCompleted) and later_child[-1].result == "child answer"
    # the child's first turn and its tool ran once; only its held turn was asked again
    assert provider.child_answered == [0, 1]
    assert await _executions(store, "memory.remember") == 1
    # the parent's turns were each asked once (the spawn its first turn asked for is
    # the cut: made again live, from the recorded reply)
    assert provider.answered == [0, 1]
    # the job's tokens are exactly what the provider's replies used
    assert finished.tokens == provider.spent
    report = await _replays_exactly(db_path, second)
    assert report.status == "completed" and len(list(report.walk())) == 2
    await _replays_exactly(db_path, first)


async def test_a_child_that_completed_unseen_by_its_paused_parent_is_not_done_again(
    store, db_path, script, workspace, monkeypatch,
) -> None:
    """The parent's turn spawns a slow and a fast child and waits for the slow one
    first; the fast one completes (its tool ran), the job is paused before the parent
    ever reads that answer. On resume the parent spawns both again: the slow child
    continues where it was cut off, and the fast one is taken over by a run that
    replays it to its end, so its model turns and its tool are not done again and
    its tokens are not counted twice."""
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    model = script(
        {"match": "CHILD slow", "replies": [{"text": "slow answer"}]},
        {"match": "CHILD fast", "replies": [
            {"tool_calls": [call("memory.remember", fact="the fast child's step")]},
            {"text": "fast answer"},
        ]},
        {"replies": [
            {"tool_calls": [call("agent.spawn", prompt="CHILD slow"), call("agent.spawn", prompt="CHILD fast")]},
            {"text": "parent done"},
        ]},
    )
    provider = ProviderCalls(monkeypatch, child_hold=True, child_turn=0, hold_text="CHILD slow")

    async def fast_child_completed() -> bool:
        ended = await store.read_all(types=["run.completed"])
        return any(r.event.result == "fast answer" for r in ended)

    queue = await JobQueue.open(store)
    job, finished = await _pause_while_held_then_resume(store, queue, provider, model, fast_child_completed)
    assert finished.status == "completed", finished.error
    assert finished.result["result"] == "parent done"
    first, second = await _job_runs(store, job.id)
    old_slow, old_fast = [e.child_run_id for e in await run_events(store, first) if isinstance(e, RunChildSpawned)]
    new_slow, new_fast = [e.child_run_id for e in await run_events(store, second) if isinstance(e, RunChildSpawned)]
    assert isinstance((await run_events(store, old_slow))[-1], RunCancelled)
    fast_end = (await run_events(store, old_fast))[-1]
    assert isinstance(fast_end, RunCompleted) and fast_end.result == "fast answer"
    adopted = await run_events(store, new_fast)
    assert adopted[0].resumed_from.run_id == old_fast and adopted[0].parent_run_id == second
    assert isinstance(adopted[-1], RunCompleted) and adopted[-1].result == "fast answer"
    assert (await run_events(store, new_slow))[0].resumed_from.run_id == old_slow
    # the fast child's two turns and the slow child's one turn were each asked once,
    # and the fast child's tool ran once
    assert sorted(provider.child_answered) == [0, 0, 1]
    assert await _executions(store, "memory.remember") == 1
    assert provider.answered == [0, 1]
    # the job's tokens are exactly what the provider's replies used
    assert finished.tokens == provider.spent
    report = await _replays_exactly(db_path, second)
    assert report.status == "completed" and len(list(report.walk())) == 3
    await _replays_exactly(db_path, first)


async def test_work_before_the_spawn_of_an_unfinished_child_is_not_redone(
    store, db_path, script, workspace, monkeypatch,
) -> None:
    """The continuation replays the parent up to the spawn of the child that had
    not finished (it was waiting for its first answer), then spawns it again: a new
    child run continuing the earlier one; the earlier child stays cancelled."""
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    model = script(
        {"match": "CHILD", "replies": [{"text": "child answer"}]},
        {"replies": [
            {"tool_calls": [call("memory.remember", fact="before the child")]},
            {"tool_calls": [call("agent.spawn", prompt="CHILD help")]},
            {"text": "parent done"},
        ]},
    )
    provider = ProviderCalls(monkeypatch, child_hold=True)  # the child waits in its first turn
    queue = await JobQueue.open(store)
    job, finished = await _pause_while_held_then_resume(store, queue, provider, model)
    assert finished.status == "completed", finished.error
    assert finished.result["result"] == "parent done"
    first, second = await _job_runs(store, job.id)
    assert provider.answered == [0, 1, 2]  # the parent's turns 0 and 1 were not asked again
    assert provider.child_answered == [0]  # only the restarted child answered
    assert await _executions(store, "memory.remember") == 1
    spawned = [e for e in await run_events(store, first) if isinstance(e, RunChildSpawned)]
    (old_child,) = [e.child_run_id for e in spawned]
    assert isinstance((await run_events(store, old_child))[-1], RunCancelled)
    later = await run_events(store, second)
    (new_child,) = [e.child_run_id for e in later if isinstance(e, RunChildSpawned)]
    assert new_child != old_child
    assert (await run_events(store, new_child))[0].resumed_from.run_id == old_child
    assert later[0].resumed_from.position < (await store.read_stream(f"run-{first}"))[-1].position
    report = await _replays_exactly(db_path, second)
    assert report.status == "completed" and len(list(report.walk())) == 2
    await _replays_exactly(db_path, first)


async def test_tokens_of_a_turn_whose_count_a_pause_cut_off_reach_the_job_on_resume(
    store, script, workspace, monkeypatch,
) -> None:
    """The job is paused after the run recorded a model turn and before the turn's
    tokens reached the job (the fenced write is refused). The next attempt serves
    that turn from the record without counting it; it first gives the job what the
    earlier run used and the job was not given, so the job's totals are the runs'."""
    from gormes.actors.runs.live import LiveRunContext

    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    model = script({"replies": [
        {"tool_calls": [call("fs.read", path="README.md")]},
        {"tool_calls": [call("fs.read", path="README.md")]},
        {"text": "done"},
    ]})
    queue = await JobQueue.open(store)
    job = await queue.submit("agent", {"prompt": "work", "model": model})
    original = LiveRunContext._count
    paused_once: list[Tokens] = []

    async def count(ctx: LiveRunContext, tokens: Tokens, model: str | None = None) -> None:
        if not paused_once and ctx._job is not None:  # the first turn: pause right here
            paused_once.append(tokens)
            await queue.pause(job.id)
        await original(ctx, tokens, model)

    monkeypatch.setattr(LiveRunContext, "_count", count)
    async with _worker_until_ended(store, queue, job.id):
        await wait_until(lambda: _status_in(queue, job.id, "paused"), timeout=10)
        await wait_until(lambda: _attempt_ended(store, job.id), timeout=10)
        assert (await queue.get(job.id)).tokens == Tokens()  # the turn's tokens were refused
        await queue.resume(job.id)

    finished = await queue.get(job.id)
    assert finished.status == "completed", finished.error
    first, second = await _job_runs(store, job.id)
    (first_turn,) = [e.usage for e in await run_events(store, first) if isinstance(e, RunLlmTurn)]
    assert paused_once == [first_turn] and first_turn != Tokens()
    later = await run_events(store, second)
    assert later[0].resumed_from.run_id == first
    used = sum((e.usage for e in later if isinstance(e, RunLlmTurn)), Tokens())  # the copied turn included
    assert finished.tokens == used
    notes = [r.event.entry for r in await store.read_stream(job_stream(job.id))
             if isinstance(r.event, JobTranscribed) and isinstance(r.event.entry.data, dict)
             and "missed_tokens" in r.event.entry.data]
    assert [n.data["missed_tokens"] for n in notes] == [msgspec.to_builtins(first_turn)]


async def _attempt_ended(store: Any, job_id: str) -> bool:
    (run_id,) = await _job_runs(store, job_id)
    return type((await run_events(store, run_id))[-1]).__name__ in ("RunCancelled", "RunFailed")
