"""Tool denial (allowlist, operator-only by name, from a subagent) and inbox
steering: a message sent mid-run reaches the model before its next turn."""

from __future__ import annotations

from pathlib import Path

import msgspec
import trio
from run_helpers import run_events

from gormes.actors.runs.manager import RunManager
from gormes.events.runs import RunChildFinished, RunInboxRead, RunLlmTurn, RunToolCalled
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor
from gormes.ops.registry import Registry
from gormes.ops.spec import OperationSpec


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


async def test_tools_outside_the_allowlist_and_operator_only_tools_are_denied(store, executor, script, workspace: Path):
    marker = workspace / "touched"
    model = script({"replies": [
        {"tool_calls": [
            call("fs.list", path="."),  # registered, prompt-visible, but not in the allowlist
            call("shell.run", argv=["touch", str(marker)]),  # operator-only, asked by name
            call("fs.read", path="README.md"),
        ]},
        {"text": "done"},
    ]})
    async with RunManager.open(store, executor=executor) as runs:
        outcome = await runs.run("agent", {"prompt": "p"}, model=model, tools=["fs.read"])
    assert outcome.status == "completed"
    events = await run_events(store, outcome.run_id)
    tools = [e for e in events if isinstance(e, RunToolCalled)]
    assert [(t.operation, t.outcome) for t in tools] == [
        ("fs.list", "denied"), ("shell.run", "denied"), ("fs.read", "ok")]
    assert "not allowed for this run" in tools[1].error
    assert not marker.exists()
    # the model was offered fs.read and agent.spawn only, and told about the denials
    last = [e for e in events if isinstance(e, RunLlmTurn)][-1]
    assert last.message_count == 5


async def test_a_subagent_cannot_run_an_operator_only_tool_even_by_name(store, executor, script, workspace: Path):
    marker = workspace / "touched"
    model = script(
        {"match": "CHILD", "replies": [
            {"tool_calls": [call("shell.run", argv=["touch", str(marker)])]}, {"text": "tried"}]},
        {"replies": [{"tool_calls": [call("agent.spawn", prompt="CHILD", tools=["shell.run", "fs.read"])]},
                     {"text": "parent done"}]},
    )
    async with RunManager.open(store, executor=executor) as runs:
        outcome = await runs.run("agent", {"prompt": "p"}, model=model, tools=["shell.run", "fs.read"])
    assert outcome.status == "completed"
    child_id = next(e for e in await run_events(store, outcome.run_id) if isinstance(e, RunChildFinished)).child_run_id
    child = await run_events(store, child_id)
    assert child[0].trust == "child-agent"
    denied = next(e for e in child if isinstance(e, RunToolCalled))
    assert (denied.operation, denied.outcome) == ("shell.run", "denied")
    assert not marker.exists()


class PauseInput(msgspec.Struct, frozen=True):
    pass


class PauseOutput(msgspec.Struct, frozen=True):
    resumed: bool


async def test_an_inbox_message_steers_the_agent_before_its_next_turn(store, workspace: Path, script):
    reached, go = trio.Event(), trio.Event()

    async def pause(ctx, value):
        reached.set()
        await go.wait()
        return PauseOutput(resumed=True)

    registry = Registry([*default_registry().list(), OperationSpec(
        name="test.pause", description="Wait until the test says go.", input_type=PauseInput,
        output_type=PauseOutput, handler=pause, trust=frozenset({"operator", "child-agent"}),
        audit_kind="test", prompt_visible=True,
    )])
    executor = Executor(registry, store, workspace=workspace)
    model = script({"replies": [{"tool_calls": [call("test.pause")]}, {"text": "steered"}]})
    async with RunManager.open(store, executor=executor) as runs:
        handle = await runs.start("agent", {"prompt": "p"}, model=model)
        await reached.wait()
        message_id = await handle.send("focus on the tests", sender="operator")
        go.set()
        outcome = await handle.outcome()
    assert outcome.status == "completed"
    events = await run_events(store, outcome.run_id)
    reads = [e for e in events if isinstance(e, RunInboxRead)]
    assert [len(r.messages) for r in reads] == [0, 1]
    assert reads[1].messages[0].id == message_id
    assert reads[1].messages[0].payload == "focus on the tests"
    turns = [e for e in events if isinstance(e, RunLlmTurn)]
    # read before the second turn, which saw it: user, assistant, tool, injected user
    assert reads[1].seq < turns[1].seq and turns[1].message_count == 4


class BoomInput(msgspec.Struct, frozen=True):
    pass


class BoomOutput(msgspec.Struct, frozen=True):
    ok: bool


async def test_each_tool_call_s_audit_and_its_record_commit_together(store, workspace: Path, script):
    async def boom(ctx, value):
        raise RuntimeError("boom")

    registry = Registry([*default_registry().list(), OperationSpec(
        name="test.boom", description="Fail.", input_type=BoomInput, output_type=BoomOutput,
        handler=boom, trust=frozenset({"operator", "child-agent"}), audit_kind="test", prompt_visible=True,
    )])
    executor = Executor(registry, store, workspace=workspace)
    model = script({"replies": [
        {"tool_calls": [call("fs.read", path="README.md"), call("test.boom"), call("fs.read", path="missing")]},
        {"text": "done"},
    ]})
    async with RunManager.open(store, executor=executor) as runs:
        outcome = await runs.run("agent", {"prompt": "p"}, model=model)
    assert outcome.status == "completed"
    records = await store.read_all(types=["audit.operation", "run.tool_called"])
    pairs = [(records[i], records[i + 1]) for i in range(0, len(records), 2)]
    assert [(a.event.operation, a.event.outcome, t.event.outcome) for a, t in pairs] == [
        ("fs.read", "ok", "ok"), ("test.boom", "error", "error"), ("fs.read", "invalid", "error")]
    for audit, tool in pairs:
        assert tool.position == audit.position + 1  # one transaction: nothing in between
        assert audit.event.run_id == outcome.run_id and audit.event.caller == tool.stream
    assert pairs[1][1].event.error_type == "RuntimeError"


async def test_a_cancelled_tool_call_is_audited_and_not_recorded_in_the_run(store, workspace: Path, script):
    reached = trio.Event()

    async def pause(ctx, value):
        reached.set()
        await trio.sleep_forever()

    registry = Registry([*default_registry().list(), OperationSpec(
        name="test.pause", description="Wait forever.", input_type=PauseInput,
        output_type=PauseOutput, handler=pause, trust=frozenset({"operator", "child-agent"}),
        audit_kind="test", prompt_visible=True,
    )])
    executor = Executor(registry, store, workspace=workspace)
    model = script({"replies": [{"tool_calls": [call("test.pause")]}, {"text": "never"}]})
    async with RunManager.open(store, executor=executor) as runs:
        handle = await runs.start("agent", {"prompt": "p"}, model=model)
        await reached.wait()
        handle.cancel("stop")
        outcome = await handle.outcome()
    assert outcome.status == "cancelled"
    (audit,) = [r.event for r in await store.read_all(types=["audit.operation"])]
    assert (audit.operation, audit.outcome, audit.run_id) == ("test.pause", "cancelled", outcome.run_id)
    assert not [e for e in await run_events(store, outcome.run_id) if isinstance(e, RunToolCalled)]


async def test_messages_sent_while_a_run_reads_its_inbox_are_each_read_exactly_once(store):
    from gormes.actors.runs.context import RunHandlerRegistry, run_handler
    from gormes.events.runs import RunMessageSent, run_stream

    handlers = RunHandlerRegistry()

    @run_handler("collector", registry=handlers)
    async def collector(ctx, input):
        seen: list[str] = []
        while len(seen) < input:
            seen.extend(m.payload for m in await ctx.inbox())
            await ctx.log("between reads")
        return seen

    sent = [f"m{i}" for i in range(12)]
    async with RunManager.open(store, handlers=handlers) as runs:
        handle = await runs.start("collector", len(sent))
        stream = run_stream(handle.run_id)
        async with trio.open_nursery() as senders:
            for i, payload in enumerate(sent):
                if i % 2:  # through send_message, and as a plain append by some other writer
                    senders.start_soon(handle.send, payload)
                else:
                    senders.start_soon(store.append, stream, [RunMessageSent(
                        message_id=f"direct-{i}", sender="test", payload=payload, sent_at=i)])
                await trio.sleep(0)
        outcome = await handle.outcome()
    assert outcome.status == "completed"
    assert sorted(outcome.result) == sorted(sent)  # every message once, none lost, none twice
    reads = [e for e in await run_events(store, handle.run_id) if isinstance(e, RunInboxRead)]
    assert sorted(m.payload for r in reads for m in r.messages) == sorted(sent)


async def test_an_inbox_read_decodes_the_messages_only_not_the_runs_own_turns(store, executor, script, monkeypatch):
    """Each step's inbox read reads the run's stream after the last receipt: it
    asks the log for messages only, so the run's own turns (a model turn holds
    its request) are skipped in the database instead of decoded (issue 20)."""
    from gormes.events.log_base import LogBase
    from gormes.events.runs import RunMessageSent

    decoded: list[tuple[str, tuple[str, ...], list[str]]] = []  # the typed reads: asked, decoded
    untyped: list[list[str]] = []  # reads of a run's tail that decode every type
    whole = LogBase.read_stream

    def spy(self, stream, after_version=0, types=None):
        records = whole(self, stream, after_version, types)
        if stream.startswith("run-") and after_version > 0 and types is None:
            untyped.append([r.type for r in records])
        elif types is not None:
            decoded.append((stream, tuple(types), [r.type for r in records]))
        return records

    monkeypatch.setattr(LogBase, "read_stream", spy)
    model = script({"replies": [
        {"tool_calls": [call("fs.read", path="README.md")]},
        {"tool_calls": [call("fs.read", path="README.md")]},
        {"text": "done"},
    ]})
    async with RunManager.open(store, executor=executor) as runs:
        handle = await runs.start("agent", {"prompt": "p"}, model=model, tools=["fs.read"])
        await store.append(f"run-{handle.run_id}", [RunMessageSent(
            message_id="M1", sender="test", payload="hi", sent_at=1)])
        outcome = await handle.outcome()
    assert outcome.status == "completed"
    mine = [(asked, types) for stream, asked, types in decoded if stream == f"run-{handle.run_id}"]
    own = [types for asked, types in mine if "run.message_sent" in asked]
    # the first read, and the one after the message landed (if it landed after the
    # first): messages only; a turn whose stream holds only the run's own writes reads nothing
    assert 1 <= len(own) <= 2 and own[-1] == ["run.message_sent"], own
    assert all(set(types) <= {"run.message_sent"} for types in own), own
    assert untyped == [], untyped  # nothing reads the run's tail whole
    # the run's end asks for its last event only if that is an end: none was, none decoded
    assert [types for asked, types in mine if "run.message_sent" not in asked] == [[]], mine
    events = await run_events(store, outcome.run_id)
    reads = [e for e in events if isinstance(e, RunInboxRead)]
    assert [m.id for r in reads for m in r.messages] == ["M1"]  # read once, whenever it landed
