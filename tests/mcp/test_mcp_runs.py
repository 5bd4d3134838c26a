"""Reading and steering runs through `gormes mcp`: a message to a live run, its
timeline, and an agent run submitted over MCP and run by a real worker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio
from agent_worker import agent_worker
from mcp_helpers import CLIENT_NAME, call_ok, call_refused, gormes_mcp

from gormes.actors.jobs.queue import JobQueue
from gormes.actors.runs.context import RunContext, RunHandlerRegistry
from gormes.actors.runs.manager import RunManager
from gormes.actors.jobs.worker import WorkerConfig
from gormes.tools.memory import own_scope

TERMINAL = ("completed", "failed", "dead", "cancelled")


async def test_a_message_reaches_a_live_run_and_its_timeline_shows_it(store, db_path):
    may_read = trio.Event()

    async def read_orders(ctx: RunContext, input: Any) -> Any:
        await may_read.wait()  # the test lets it read once the message is sent
        return [item.payload for item in await ctx.inbox()]

    handlers = RunHandlerRegistry({"read_orders": read_orders})
    async with RunManager.open(store, handlers=handlers) as runs:
        # a run acting for this client: a gateway reads and steers only those (gormes/tools/run_trust.py)
        handle = await runs.start("read_orders", {"why": "test"}, trust="gateway",
                                  memory_scope=own_scope(f"mcp:{CLIENT_NAME}"))
        async with gormes_mcp(db_path) as client:
            running = await call_ok(client, "run__get", run_id=handle.run_id)
            sent = await call_ok(client, "run__send", run_id=handle.run_id, payload={"order": "be brief"})
            may_read.set()
            outcome = await handle.outcome()
            summary = await call_ok(client, "run__get", run_id=handle.run_id)
            timeline = await call_ok(client, "run__timeline", run_id=handle.run_id)
            listed = await call_ok(client, "run__list", status="completed")
            too_late = await call_refused(client, "run__send", run_id=handle.run_id, payload="again")
            unknown = await call_refused(client, "run__timeline", run_id="no-such-run")

    assert running["status"] == "running"
    assert sent["sender"] == f"mcp:{CLIENT_NAME}"
    assert outcome.result == [{"order": "be brief"}]
    assert (summary["status"], summary["result"], summary["handler"]) == (
        "completed", [{"order": "be brief"}], "read_orders",
    )
    kinds = [entry["type"] for entry in timeline["timeline"]]
    assert kinds == ["run.message_sent", "run.inbox_read", "run.completed"]
    (read,) = [e for e in timeline["timeline"] if e["type"] == "run.inbox_read"]
    assert read["messages"][0]["sender"] == f"mcp:{CLIENT_NAME}"
    assert read["messages"][0]["id"] == sent["message_id"]
    assert [r["run_id"] for r in listed["runs"]] == [handle.run_id]
    assert too_late.startswith("RunNotFound") and "has ended" in too_late
    assert unknown == "UserError: no run with id 'no-such-run'"


async def test_an_agent_run_submitted_over_mcp_runs_on_a_worker_and_is_read_back(store, db_path, tmp_path: Path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"agents": [{"replies": [
        {"tool_calls": [{"name": "time.now", "arguments": {}}]},
        {"text": "It is now."},
    ]}]}))
    queue = await JobQueue.open(store)
    worker = agent_worker(queue, WorkerConfig(concurrency=1), store=store, log=lambda _: None)
    # A gateway may choose only a model the operator allows (gormes/tools/job_trust.py).
    async with gormes_mcp(db_path, env={"GORMES_GATEWAY_MODELS": f"scripted:{script}"}) as client:
        job = await call_ok(client, "run__submit", prompt="What time is it?", model=f"scripted:{script}",
                            tools=["time.now"])
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            while True:  # until the worker has recorded the job's end
                seen = queue.generation
                if (await queue.get(job["id"])).status in TERMINAL:
                    break
                await queue.wait_for_work(seen)
            worker.stop()
        done = await call_ok(client, "job__get", id=job["id"])
        runs = await call_ok(client, "run__list", job_id=job["id"])
        run_id = done["result"]["run_id"]
        timeline = await call_ok(client, "run__timeline", run_id=run_id)

    assert done["status"] == "completed", done["error"]
    assert done["result"]["result"] == "It is now."
    assert [r["run_id"] for r in runs["runs"]] == [run_id]
    assert (timeline["job_id"], timeline["status"], timeline["iterations"]) == (job["id"], "completed", 2)
    tools = [e for e in timeline["timeline"] if e["type"] == "run.tool_called"]
    assert [(t["operation"], t["outcome"]) for t in tools] == [("time.now", "ok")]
