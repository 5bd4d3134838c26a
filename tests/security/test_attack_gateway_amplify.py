"""Cheap writes a gateway can make big: a few bytes from an MCP client, megabytes
in the log, which no retention removes from the audit trail.

- The client's self-declared name (`clientInfo.name`, sent once in the handshake)
  became the caller id of every call, stored whole in each call's audit record,
  each job's submitter and each fact's origin: a 2 MB name turned a 50-byte
  `time__now` into a 2 MB audit record.
- The 1 MiB cap on a gateway's job data (`job.submit`) was not applied to
  `run.submit`'s job (a tool allowlist repeated 500,000 times, or a prompt and a
  system prompt of 1,000,000 control characters each: 22 and 36 MB stored), nor to
  the payload of `run.send` and `job.send`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from mcp_helpers import audit_events, call_ok, gormes_mcp
from log_reads import log_head

from gormes.actors.jobs.queue import JobQueue, Submitter
from gormes.actors.runs.context import RunContext, RunHandlerRegistry
from gormes.actors.runs.manager import RunManager
from gormes.events.sqlite import SQLiteEventStore
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, InvalidOperationInput
from gormes.tools.builtin import default_registry
from gormes.tools.job_trust import MAX_UNTRUSTED_DATA_BYTES
from gormes.tools.memory import own_scope

TWO_MIB = 2 * 1024 * 1024


async def _added(db: Path, head: int) -> list[Any]:
    async with SQLiteEventStore.open(db) as store:
        return await store.read_all(after_position=head)


async def call_refused(client: Any, tool: str, **arguments: Any) -> str:
    """The one line of a refused call (what was taken is not printed: it is huge)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} was taken"
    return result.content[0].text



async def test_a_huge_client_name_does_not_make_every_record_huge(db_path: Path):
    name = "A" * 1_000_000
    async with gormes_mcp(db_path, client_name=name) as client:
        await call_ok(client, "time__now")
        job = await call_ok(client, "job__submit", name="echo", data=1)
        remembered = await call_ok(client, "memory__remember", fact="the sky is blue")
    async with SQLiteEventStore.open(db_path) as store:
        audited = await audit_events(store)
        queue = await JobQueue.open(store)
        submitter = (await queue.get(job["id"])).submitter
    assert [a.operation for a in audited] == ["time.now", "job.submit", "memory.remember"]
    assert {len(a.caller) for a in audited} == {len("mcp:") + 200}, "the caller id is cut to 200 characters"
    assert all(a.caller == "mcp:" + "A" * 200 for a in audited)
    assert submitter.caller == "mcp:" + "A" * 200
    assert remembered["scope"] == own_scope("mcp:" + "A" * 200)
    # the whole log holds less than the name once
    files = [db_path, Path(f"{db_path}-wal")]
    assert sum(f.stat().st_size for f in files if f.exists()) < 1_000_000


async def test_run_submit_keeps_a_gateways_job_data_to_the_cap(db_path: Path):
    head = await log_head(db_path)
    async with gormes_mcp(db_path) as client:
        tools = await call_refused(client, "run__submit", prompt="p", tools=["time.now"] * 200_000)
        prompts = await call_refused(client, "run__submit", prompt="\x01" * 400_000, system="\x01" * 400_000)
        fine = await call_ok(client, "run__submit", prompt="p" * 500_000, tools=["time.now"])
    assert tools.startswith("InvalidOperationInput: ") and "job data" in tools, tools
    assert prompts.startswith("InvalidOperationInput: ") and "job data" in prompts, prompts
    assert fine["data"]["tools"] == ["time.now"]
    added = await _added(db_path, head)
    refusals = [r.event for r in added if r.type == "audit.operation" and r.event.outcome != "ok"]
    assert [(a.operation, a.outcome) for a in refusals] == [("run.submit", "invalid")] * 2
    assert sum(1 for r in added if r.type == "job.submitted") == 1  # only the one within the cap


async def test_run_send_keeps_a_gateways_message_to_the_cap(store, db_path: Path):
    release = trio.Event()

    async def wait(ctx: RunContext, input: Any) -> Any:
        await release.wait()
        return [len(str(item.payload)) for item in await ctx.inbox()]

    client_id = "mcp:gormes-tests"
    async with RunManager.open(store, handlers=RunHandlerRegistry({"wait": wait})) as runs:
        handle = await runs.start("wait", {}, trust="gateway", memory_scope=own_scope(client_id))
        async with gormes_mcp(db_path) as client:
            refused = await call_refused(client, "run__send", run_id=handle.run_id, payload="y" * TWO_MIB)
            await call_ok(client, "run__send", run_id=handle.run_id, payload="small")
        release.set()
        outcome = await handle.outcome()
    assert refused.startswith("InvalidOperationInput: ") and "message" in refused, refused
    assert outcome.result == [len("small")]
    denied = [a for a in await audit_events(store) if a.operation == "run.send" and a.outcome != "ok"]
    assert [a.outcome for a in denied] == ["invalid"]


async def test_job_send_keeps_an_untrusted_callers_message_to_the_cap(store):
    """A gateway's run (caller job_id: its job) messaging its own child job."""
    queue = await JobQueue.open(store)
    scope = own_scope("mcp:x")
    mine = Submitter(trust="gateway", caller="mcp:x", scope=scope)
    parent = await queue.submit("agent", {"prompt": "p"}, submitter=mine)
    child = await queue.submit("echo", None, {"parent_id": parent.id}, submitter=mine)
    executor = Executor(default_registry(), store, jobs=queue)
    caller = Caller(trust="gateway", id=f"run-{parent.id}", run_id="r1", job_id=parent.id, scope=scope)
    try:
        await executor.call("job.send", {"id": child.id, "payload": "z" * TWO_MIB}, caller)
    except InvalidOperationInput as exc:
        assert "message" in str(exc)
    else:
        raise AssertionError(f"a {TWO_MIB}-byte message from a gateway's run was taken")
    await executor.call("job.send", {"id": child.id, "payload": "z" * (MAX_UNTRUSTED_DATA_BYTES // 2)}, caller)
    assert [len(m.payload) for m in await queue.inbox(child.id)] == [MAX_UNTRUSTED_DATA_BYTES // 2]
    operator = Caller(trust="operator", id="cli")
    await executor.call("job.send", {"id": child.id, "payload": "z" * TWO_MIB}, operator)  # not capped
