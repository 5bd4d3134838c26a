"""A run's inbox read asks the log only when something other than the run wrote to
its stream since the last read; the receipt of every read is recorded as before
(issue 20)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import trio
from run_helpers import run_events

from gormes.actors.runs.manager import RunManager
from gormes.events.log_base import LogBase
from gormes.events.runs import RunInboxRead, RunMessageSent, run_stream
from gormes.events.sqlite import SQLiteEventStore
from gormes.ops.executor import Executor
from gormes.ops.registry import Registry
from gormes.ops.spec import OperationSpec
from gormes.tools.builtin import default_registry


class PauseInput(msgspec.Struct, frozen=True):
    pass


class PauseOutput(msgspec.Struct, frozen=True):
    resumed: bool


def spy_typed_reads(monkeypatch, stream: list[str]) -> list[list[str]]:
    """The inbox's reads of the run's stream (typed reads of its messages; the run's
    end reads its last event typed too): the types read."""
    reads: list[list[str]] = []
    whole = LogBase.read_stream
    message = RunMessageSent.__struct_config__.tag

    def spy(self, name, after_version=0, types=None):
        records = whole(self, name, after_version, types)
        if types is not None and message in types and stream and name == stream[0]:
            reads.append([r.type for r in records])
        return records

    monkeypatch.setattr(LogBase, "read_stream", spy)
    return reads


async def test_a_run_nobody_else_writes_to_reads_its_stream_once_and_records_every_read(
    store, executor, script, monkeypatch,
):
    stream: list[str] = []
    reads = spy_typed_reads(monkeypatch, stream)
    tool_turn = {"tool_calls": [{"name": "time.now", "arguments": {}}]}
    model = script({"replies": [tool_turn, tool_turn, tool_turn, {"text": "done"}]})
    async with RunManager.open(store, executor=executor) as runs:
        handle = await runs.start("agent", {"prompt": "p"}, model=model)
        stream.append(run_stream(handle.run_id))
        outcome = await handle.outcome()
    assert outcome.status == "completed"
    assert reads == [[]]  # the first read only: it has no receipt to count the run's writes from
    events = await run_events(store, outcome.run_id)
    receipts = [e for e in events if isinstance(e, RunInboxRead)]
    assert [len(r.messages) for r in receipts] == [0, 0, 0, 0]  # one before each turn, as before


async def test_a_message_another_process_appends_mid_run_is_read_before_the_next_turn(
    store, db_path: Path, workspace: Path, script, monkeypatch,
):
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
    pause_turn = {"tool_calls": [{"name": "test.pause", "arguments": {}}]}
    model = script({"replies": [pause_turn, {"text": "steered"}]})
    async with RunManager.open(store, executor=executor) as runs:
        handle = await runs.start("agent", {"prompt": "p"}, model=model)
        await reached.wait()
        # a second connection to the file: what another process's append looks like
        async with SQLiteEventStore.open(db_path) as other:
            await other.append(run_stream(handle.run_id), [RunMessageSent(
                message_id="from-elsewhere", sender="other", payload="look here", sent_at=1)])
        go.set()
        outcome = await handle.outcome()
    assert outcome.status == "completed"
    receipts = [e for e in await run_events(store, outcome.run_id) if isinstance(e, RunInboxRead)]
    assert [[m.id for m in r.messages] for r in receipts] == [[], ["from-elsewhere"]]
