"""A gateway piling messages into its own run's inbox (decision 0074).

A gateway may message its own running run (`run.send`), each message at most 1 MiB
of JSON, but nothing bounded how many waited unread. The run reads them all at
its next turn: one `run.inbox_read` event holding every one, and one model request
carrying them all. Measured: 101 messages of 1 MB made a 101 MB event (1,000 would
make 1 GB, and a request no model takes), and each send folded every unread
message again. A gateway's (or child agent's) unread messages to a run now hold
at most the cap on its job data, counted in the transaction that appends the
message; past it `run.send` is refused (audited as denied) until the run has read
them. The operator's and the system's messages are not capped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from mcp_helpers import audit_events, call_ok, call_refused, gormes_mcp

from gormes.actors.runs.context import RunContext, RunHandlerRegistry
from gormes.actors.runs.manager import RunManager
from gormes.events.runs import RunMessageSent, run_stream
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller
from gormes.tools.builtin import default_registry
from gormes.tools.memory import own_scope

PART = "m" * 400_000  # two fit under the cap, three do not


async def test_a_gateways_unread_messages_to_its_run_are_capped(store, db_path: Path):
    first_read, read_done, second_read = trio.Event(), trio.Event(), trio.Event()

    async def reader(ctx: RunContext, input: Any) -> Any:
        await first_read.wait()
        first = await ctx.inbox()
        read_done.set()
        await second_read.wait()
        return [len(first), len(await ctx.inbox())]

    async with RunManager.open(store, handlers=RunHandlerRegistry({"reader": reader})) as runs:
        handle = await runs.start("reader", {}, trust="gateway", memory_scope=own_scope("mcp:gormes-tests"))
        async with gormes_mcp(db_path) as client:
            for _ in range(2):
                await call_ok(client, "run__send", run_id=handle.run_id, payload=PART)
            refused = await call_refused(client, "run__send", run_id=handle.run_id, payload=PART)
            first_read.set()
            await read_done.wait()
            await call_ok(client, "run__send", run_id=handle.run_id, payload=PART)  # read: room again
        second_read.set()
        outcome = await handle.outcome()
    assert refused.startswith("OperationDenied: ") and "has not read its messages" in refused, refused
    assert outcome.result == [2, 1]
    sent = [r for r in await store.read_stream(run_stream(handle.run_id)) if isinstance(r.event, RunMessageSent)]
    assert len(sent) == 3, "the refused message was not written"
    audited = [(a.operation, a.outcome) for a in await audit_events(store) if a.operation == "run.send"]
    assert audited == [("run.send", "ok"), ("run.send", "ok"), ("run.send", "denied"), ("run.send", "ok")]


async def test_the_operators_messages_are_not_capped(store):
    release = trio.Event()

    async def reader(ctx: RunContext, input: Any) -> Any:
        await release.wait()
        return len(await ctx.inbox())

    async with RunManager.open(store, handlers=RunHandlerRegistry({"reader": reader})) as runs:
        handle = await runs.start("reader", {}, trust="gateway", memory_scope=own_scope("mcp:x"))
        executor = Executor(default_registry(), store)
        for _ in range(3):
            await executor.call("run.send", {"run_id": handle.run_id, "payload": PART}, Caller(trust="operator", id="cli"))
        release.set()
        assert (await handle.outcome()).result == 3
