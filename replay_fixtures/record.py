"""Record the replay fixtures by running real runs on the scripted provider.

    .venv/bin/python replay_fixtures/record.py          # rewrites *.jsonl and manifest.json

Each fixture runs against a fresh database in a temporary directory, with the
real RunManager, the real ops executor over replay_fixtures/workspace and the
scripted provider (a script of replies, not a model); its runs (children
included) are then exported in the `gormes export` line shape. Nothing here
writes an event by hand. Run ids, the clock and random draws are fixed so that
a re-recording differs only in timing (recorded_at, durations, and where a
cancellation happened to land).

The manifest gives each fixture's top runs with the outcome they were recorded
with and how many events an exact replay reproduces (run.started, every
observation and the end, over the run and its children).
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import replay_fixtures.bounded  # noqa: F401  (registers the fixture handlers)
import replay_fixtures.handlers  # noqa: F401
from gormes.providers import open_provider
from gormes.actors.runs.manager import RunManager, send_message
from gormes.events.catalog import load_all
from gormes.events.jsonl import open_for_reading, to_line
from gormes.events.run_export import run_records
from gormes.events.sqlite import SQLiteEventStore
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor

WORKSPACE = HERE / "workspace"
# Every fixture run has this tool allowlist (recorded in run.started), so the tools
# its model is offered, and so its request hashes, do not change when operations
# are added to the registry; only a change to these operations does.
TOOLS = ("fs.grep", "fs.list", "fs.read", "time.now")
SCRIPTS = HERE / "scripts"
ENDS = ("run.completed", "run.failed", "run.cancelled")
# Replay reproduces run.started, every observation and the end; not these:
NOT_REPRODUCED = ("run.message_sent", "run.suspended", "run.resumed", "run.llm_cut")

Recorder = Callable[[Any, Path], Awaitable[list[str]]]
FIXTURES: dict[str, tuple[str, Recorder]] = {}


def fixture(name: str, shows: str) -> Callable[[Recorder], Recorder]:
    def register(fn: Recorder) -> Recorder:
        FIXTURES[name] = (shows, fn)
        return fn

    return register


def write_script(tmp: Path, name: str, agents: list[dict[str, Any]]) -> str:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"model": "scripted", "agents": agents}, indent=1))
    return f"scripted:{path}"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def manager(store: Any, name: str, **options: Any):
    counter = itertools.count(1)
    clock = itertools.count(1_800_000_000, 60)
    draws = itertools.cycle([0.25, 0.5, 0.75])
    return RunManager.open(
        store,
        executor=Executor(default_registry(), store, workspace=WORKSPACE),
        ids=lambda: f"{name}-{next(counter)}",
        clock=lambda: float(next(clock)),
        random=lambda: next(draws),
        llm_backoff_s=0.001,
        **options,
    )


# -- the fixtures ---------------------------------------------------------------


@fixture("subagents", "an agent whose subagent spawns a subagent: runs two levels deep")
async def subagents(store: Any, tmp: Path) -> list[str]:
    model = write_script(tmp, "subagents", [
        {"match": "LEVEL2", "replies": [
            {"tool_calls": [call("fs.grep", pattern="replay", path=".")]},
            {"text": "level two found the replay line"}]},
        {"match": "LEVEL1", "replies": [
            {"tool_calls": [call("fs.list", path="."), call("agent.spawn", prompt="LEVEL2 grep for replay")]},
            {"text": "level one done"}]},
        {"replies": [
            {"tool_calls": [call("agent.spawn", prompt="LEVEL1 survey the workspace")]},
            {"text": "top done: the tree finished"}]},
    ])
    async with manager(store, "subagents") as runs:
        outcome = await runs.run("agent", {"prompt": "Survey the workspace with helpers."}, model=model, tools=TOOLS)
    return [outcome.run_id]


@fixture("tool_error", "a tool call that fails (a missing file) and the agent carrying on")
async def tool_error(store: Any, tmp: Path) -> list[str]:
    model = write_script(tmp, "tool_error", [{"replies": [
        {"tool_calls": [call("fs.read", path="missing.txt")]},
        {"tool_calls": [call("fs.read", path="notes.txt")]},
        {"text": "missing.txt does not exist; notes.txt has two lines"}]}])
    async with manager(store, "tool-error") as runs:
        outcome = await runs.run("agent", {"prompt": "Read missing.txt, else notes.txt."}, model=model, tools=TOOLS)
    return [outcome.run_id]


class SteeringProvider:
    """The scripted provider, plus: right after its first reply to `run_id`, a
    message is sent to that run, so the agent reads it before its next turn."""

    def __init__(self, inner: Any, store: Any, run_id: str) -> None:
        self.inner, self.store, self.run_id = inner, store, run_id
        self.name, self.model = inner.name, inner.model
        self.sent = False

    async def complete(self, request: Any) -> Any:
        reply = await self.inner.complete(request)
        if not self.sent:
            self.sent = True
            await send_message(self.store, self.run_id, "Focus on notes.txt, not the README.",
                               clock=lambda: 1_800_000_000.0, ids=lambda: "steer-message-1")
        return reply


@fixture("inbox_steering", "an inbox message sent mid-run, read before the next model turn")
async def inbox_steering(store: Any, tmp: Path) -> list[str]:
    model = write_script(tmp, "inbox_steering", [{"replies": [
        {"tool_calls": [call("fs.read", path="README.md")]},
        {"tool_calls": [call("fs.read", path="notes.txt")]},
        {"text": "steered: notes.txt says every step is an event"}]}])
    run_id = "inbox-steering-1"
    async with manager(store, "inbox-steering",
                       providers=lambda spec: SteeringProvider(open_provider(spec), store, run_id)) as runs:
        outcome = await runs.run("agent", {"prompt": "Summarize the workspace."}, model=model, run_id=run_id, tools=TOOLS)
    return [outcome.run_id]


@fixture("provider_retry", "a retryable provider error, retried, then the reply")
async def provider_retry(store: Any, tmp: Path) -> list[str]:
    model = write_script(tmp, "provider_retry", [{"replies": [
        {"error": "429 rate limited", "retryable": True},
        {"tool_calls": [call("fs.list", path=".")]},
        {"error": "503 upstream overloaded", "retryable": True},
        {"text": "two files, after two retries"}]}])
    async with manager(store, "provider-retry") as runs:
        outcome = await runs.run("agent", {"prompt": "List the workspace."}, model=model, tools=TOOLS)
    return [outcome.run_id]


@fixture("timeboxed_turn", "a handler that bounds a slow model turn with a scope of its own and asks a "
         "fallback question: the turn it cut (run.llm_cut) is waited at in replay")
async def timeboxed_turn(store: Any, tmp: Path) -> list[str]:
    model = write_script(tmp, "timeboxed_turn", [
        {"match": "SLOW", "replies": [{"text": "too late", "delay_ms": 5000}]},
        {"match": "FAST", "replies": [{"text": "the fallback answer"}]},
    ])
    async with manager(store, "timeboxed") as runs:
        outcome = await runs.run("fixture.timeboxed", {"box_s": 0.2, "prompt": "What is in the workspace?"},
                                 model=model, tools=TOOLS)
    return [outcome.run_id]


@fixture("cancelled_child", "a parent that cancels its child; every kind of observation")
async def cancelled_child(store: Any, tmp: Path) -> list[str]:
    async with manager(store, "cancelled-child") as runs:
        outcome = await runs.run("fixture.cancel_child", {}, tools=TOOLS)
    return [outcome.run_id]


@fixture("paused_resumed", "an agent job paused mid-run (its run is cancelled) and resumed: a new run "
         "with resumed_from replays the cancelled run's recorded prefix, then completes live")
async def paused_resumed(store: Any, tmp: Path) -> list[str]:
    import os

    from gormes.actors.agent_jobs.install import install
    from gormes.actors.jobs.handlers import default_registry as job_handlers
    from gormes.actors.jobs.queue import JobQueue
    from gormes.actors.jobs.worker import Worker, WorkerConfig
    from gormes.events.runs import RunInboxRead, RunStarted

    os.environ["GORMES_WORKSPACE"] = str(WORKSPACE)
    model = write_script(tmp, "paused_resumed", [{"replies": [
        {"tool_calls": [call("fs.read", path="notes.txt")]},
        {"text": "resumed and finished: notes.txt read"}]}])
    queue = await JobQueue.open(store)
    job = await queue.submit("agent", {
        "handler": "fixture.wait_then_agent", "model": model, "tools": list(TOOLS),
        "input": {"word": "go", "agent": {"prompt": "Read notes.txt."}},
    })
    handlers = job_handlers.copy()
    install(handlers)  # the "agent" job
    worker = Worker(queue, handlers, WorkerConfig(concurrency=1), store=store, log=lambda _: None)

    async def runs_of_job() -> list[tuple[str, list[Any]]]:
        found = []
        for record in await store.read_all(types=["run.started"]):
            event = record.event
            if isinstance(event, RunStarted) and event.job_id == job.id:
                found.append((event.run_id, [r.event for r in await store.read_stream(record.stream)]))
        return found

    async def until(predicate: Callable[[], Awaitable[bool]]) -> None:
        with trio.fail_after(20):
            while not await predicate():
                await trio.sleep(0.01)

    async def status_is(*statuses: str) -> bool:
        return (await queue.get(job.id)).status in statuses

    async def first_run_waiting() -> bool:
        found = await runs_of_job()
        return bool(found) and any(isinstance(e, RunInboxRead) for e in found[0][1])

    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await until(first_run_waiting)
        await queue.pause(job.id)
        await until(lambda: status_is("paused"))
        await queue.send(job.id, "go")
        await queue.resume(job.id)
        await until(lambda: status_is("completed", "failed", "dead"))
        worker.stop()
        await worker.wait_stopped()
    finished = await queue.get(job.id)
    if finished.status != "completed":
        raise RuntimeError(f"the paused job ended {finished.status}: {finished.error}")
    return [run_id for run_id, _ in await runs_of_job()]


# -- recording and the manifest -------------------------------------------------


def expected(records: list[Any]) -> int:
    return sum(1 for r in records if r.type not in NOT_REPRODUCED)


async def record(name: str, recorder: Recorder) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        db = tmp / "gormes.db"
        async with SQLiteEventStore.open(db) as store:
            roots = await recorder(store, tmp)
        log = open_for_reading(db)
        try:
            trees = {root: run_records(log, root, children=True) for root in roots}
        finally:
            log.close()
    lines: dict[int, bytes] = {}
    replays = []
    for root, records in trees.items():
        lines.update((r.position, to_line(r)) for r in records)
        end = [r for r in records if r.stream == f"run-{root}" and r.type in ENDS]
        replays.append({
            "run_id": root,
            "status": end[-1].type.removeprefix("run.") if end else "unfinished",
            "events": expected(records),
            "runs": len({r.stream for r in records}),
        })
    (HERE / f"{name}.jsonl").write_bytes(b"".join(lines[p] for p in sorted(lines)))
    return {"file": f"{name}.jsonl", "replays": replays}


async def main(names: list[str]) -> None:
    load_all()
    manifest_path = HERE / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name in names or list(FIXTURES):
        shows, recorder = FIXTURES[name]
        manifest[name] = {"shows": shows, **await record(name, recorder)}
        print(f"{name}: {manifest[name]['replays']}")
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])
