"""Forks that change what was observed (decision 0034): the observation at the fork's
position replaced by a given tool error, tool result or model reply; the code then
takes another path live; the fork's start says what it replaced; the fork replays
exactly; a replacement of another kind, and an unconfirmed fork that may call
non-idempotent operations, are refused with nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import changed_handlers as changed
import pytest

from gormes.actors.runs.context import RunContext, ToolCallFailed
from gormes.actors.runs.continuation import fork_run
from gormes.actors.runs.fork_replace import (
    REPLACED_ERROR_TYPE,
    ForkRefused,
    ForkUnconfirmed,
    GivenReply,
    GivenToolCall,
    observation_hash,
    parse_reply,
    replace_observation,
    reply_replacement,
    tool_error_replacement,
    tool_result_replacement,
)
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.events.base import Recorded
from gormes.events.jobs import Tokens
from gormes.events.runs import RecordedReply, RunLlmTurn, RunStarted, RunToolCalled, run_stream
from gormes.ops.executor import Executor
from gormes.tools.builtin import default_registry


async def read_or_look_around(ctx: RunContext, input: Any) -> Any:
    """Reads a file; when that fails, lists the workspace instead: two paths."""
    try:
        read = await ctx.tool("fs.read", {"path": input["path"]})
    except ToolCallFailed as exc:
        listing = await ctx.tool("fs.list", {"path": "."})
        return {"missing": exc.message, "found": sorted(e["path"] for e in listing["entries"])}
    return {"read": read["content"]}


HANDLERS = changed.registry_with("test.read_or_look_around", read_or_look_around)


def write_script(path: Path, *replies: dict) -> str:
    path.write_text(json.dumps({"agents": [{"replies": list(replies)}]}))
    return f"scripted:{path}"


def call(name: str, **arguments: Any) -> dict:
    return {"name": name, "arguments": arguments}


async def events_of(store, run_id: str) -> list:
    return [r.event for r in await store.read_stream(run_stream(run_id))]


async def assert_replays_exactly(db_path: Path, run_id: str, handlers=HANDLERS) -> None:
    with DatabaseRuns(db_path) as source:
        report = await replay(source, run_id, registry=default_registry(), handlers=handlers)
    assert report.tree_exact, report.first_divergence


async def test_a_replaced_tool_error_sends_the_code_down_its_other_path(store, db_path, workspace) -> None:
    executor = Executor(default_registry(), store, workspace=workspace)
    async with RunManager.open(store, executor=executor, handlers=HANDLERS) as runs:
        original = await runs.run("test.read_or_look_around", {"path": "notes.txt"})
        assert original.result == {"read": "alpha\nbeta\n"}
        source = await store.read_stream(run_stream(original.run_id))
        read = next(r for r in source if r.type == "run.tool_called")
        forked = await fork_run(runs, original.run_id, read.position,
                                replace=tool_error_replacement("notes.txt: no such file"))
    assert forked.outcome.status == "completed", forked.outcome.error
    assert forked.outcome.result == {"missing": "notes.txt: no such file", "found": ["README.md", "notes.txt"]}
    new = await events_of(store, forked.run_id)
    calls = [(e.operation, e.outcome, e.error_type) for e in new if isinstance(e, RunToolCalled)]
    assert calls == [("fs.read", "error", REPLACED_ERROR_TYPE), ("fs.list", "ok", None)]  # fs.list ran live
    started = new[0]
    assert isinstance(started, RunStarted) and started.forked_from is not None
    replaced = started.forked_from.replaced
    assert replaced is not None
    assert (replaced.seq, replaced.type, replaced.kind, replaced.value) == (
        read.event.seq, "run.tool_called", "tool_error", "notes.txt: no such file")
    assert replaced.original_hash == observation_hash(read.event)
    await assert_replays_exactly(db_path, forked.run_id)
    await assert_replays_exactly(db_path, original.run_id)  # the source is untouched


async def test_a_replaced_tool_result_is_what_the_code_is_given(store, db_path, workspace) -> None:
    executor = Executor(default_registry(), store, workspace=workspace)
    async with RunManager.open(store, executor=executor, handlers=HANDLERS) as runs:
        original = await runs.run("test.read_or_look_around", {"path": "missing.txt"})
        assert original.result["missing"]  # the file is not there: the run listed the workspace
        read = next(r for r in await store.read_stream(run_stream(original.run_id)) if r.type == "run.tool_called")
        forked = await fork_run(runs, original.run_id, read.position,
                                replace=tool_result_replacement('{"content": "it was there after all"}'))
    assert forked.outcome.result == {"read": "it was there after all"}
    new = await events_of(store, forked.run_id)
    assert [(e.operation, e.outcome) for e in new if isinstance(e, RunToolCalled)] == [("fs.read", "ok")]
    assert new[0].forked_from.replaced.kind == "tool_result"
    await assert_replays_exactly(db_path, forked.run_id)


async def test_a_replaced_reply_calls_other_tools_live(store, db_path, tmp_path, workspace) -> None:
    model = write_script(tmp_path / "s.json", {"tool_calls": [call("fs.read", path="README.md")]},
                         {"text": "read the readme"})
    executor = Executor(default_registry(), store, workspace=workspace)
    async with RunManager.open(store, executor=executor) as runs:
        original = await runs.run("agent", {"prompt": "Look around."}, model=model)
        assert original.result == "read the readme"
        turn = next(r for r in await store.read_stream(run_stream(original.run_id)) if r.type == "run.llm_turn")
        given = parse_reply(json.dumps({"content": "", "tool_calls": [{"name": "fs.list", "arguments": {"path": "."}}]}))
        forked = await fork_run(runs, original.run_id, turn.position, replace=reply_replacement(given))
        text = await fork_run(runs, original.run_id, turn.position, replace=reply_replacement(parse_reply("No.")))
    # the given reply's tool call ran live; the script's second reply ended the run
    assert forked.outcome.result == "read the readme"
    new = await events_of(store, forked.run_id)
    assert [e.operation for e in new if isinstance(e, RunToolCalled)] == ["fs.list"]
    turns = [e for e in new if isinstance(e, RunLlmTurn)]
    assert [c.name for c in turns[0].reply.tool_calls] == ["fs.list"] and turns[0].usage == Tokens()
    assert new[0].forked_from.replaced.type == "run.llm_turn"
    await assert_replays_exactly(db_path, forked.run_id)
    # a text-only reply is the final answer: nothing is asked of the model again
    assert (text.outcome.status, text.outcome.result) == ("completed", "No.")
    assert [type(e).__name__ for e in await events_of(store, text.run_id)] == [
        "RunStarted", "RunInboxRead", "RunLlmTurn", "RunCompleted"]
    await assert_replays_exactly(db_path, text.run_id)


def test_a_reply_file_is_json_in_the_recorded_shape_or_text() -> None:
    assert parse_reply("  plain words") == "  plain words"
    assert parse_reply('{"content": "hi", "tool_calls": [{"name": "fs.read", "arguments": "{\\"path\\": \\"a\\"}"}]}') \
        == GivenReply(content="hi", tool_calls=[GivenToolCall(name="fs.read", arguments='{"path": "a"}')])
    replacement = reply_replacement(GivenReply(tool_calls=[GivenToolCall(name="fs.list", arguments={"path": "."})]))
    assert replacement.reply.finish_reason == "tool_calls"
    assert [(c.id, c.arguments) for c in replacement.reply.tool_calls] == [("fork_call_1", '{"path":"."}')]
    for bad in ('{"content": 3}', '{"text": "hi"}', "{not json"):
        with pytest.raises(ForkRefused, match="recorded shape"):
            parse_reply(bad)
    with pytest.raises(ForkRefused, match="not JSON"):
        tool_result_replacement("{")


async def test_a_replacement_of_another_kind_is_refused_with_nothing_written(store, tmp_path, workspace) -> None:
    model = write_script(tmp_path / "s.json", {"tool_calls": [call("fs.read", path="README.md")]}, {"text": "done"})
    executor = Executor(default_registry(), store, workspace=workspace)
    async with RunManager.open(store, executor=executor) as runs:
        original = await runs.run("agent", {"prompt": "Look around."}, model=model)
        source = await store.read_stream(run_stream(original.run_id))
        turn = next(r for r in source if r.type == "run.llm_turn")
        tool = next(r for r in source if r.type == "run.tool_called")
        inbox = next(r for r in source if r.type == "run.inbox_read")
        head = await store.head()
        cases = [
            (tool.position, reply_replacement("hi"), "is a tool call, which --reply FILE cannot replace"),
            (turn.position, tool_result_replacement("1"), "is a model reply, which --tool-result JSON cannot"),
            (turn.position, tool_error_replacement("boom"), "is a model reply, which --tool-error TEXT cannot"),
            (inbox.position, tool_error_replacement("boom"), "only a model reply or a tool call can be replaced"),
            (source[0].position, reply_replacement("hi"), "is not an observation of run"),
        ]
        for at, replacement, message in cases:
            with pytest.raises(ForkRefused, match=message):
                await fork_run(runs, original.run_id, at, replace=replacement)
    assert await store.head() == head


async def test_an_unconfirmed_fork_lists_the_non_idempotent_operations(store, tmp_path, workspace) -> None:
    model = write_script(tmp_path / "s.json", {"text": "done"})
    registry = default_registry()
    executor = Executor(registry, store, workspace=workspace)
    async with RunManager.open(store, executor=executor) as runs:
        every_tool = await runs.run("agent", {"prompt": "hi"}, model=model, trust="operator")
        read_only = await runs.run("agent", {"prompt": "hi"}, model=model, trust="operator",
                                   tools=["fs.read", "fs.list"])
        head = await store.head()
        at = (await store.read_stream(run_stream(every_tool.run_id)))[0].position
        with pytest.raises(ForkUnconfirmed) as refused:
            await fork_run(runs, every_tool.run_id, at, confirmed=False)
        assert await store.head() == head
        listed = [r.name for r in refused.value.operations]
        offered = {s.name for s in registry.tool_schemas("operator")}
        expected = sorted(s.name for s in registry.list(trust="operator")
                          if s.name in offered and s.mutating and not s.idempotent)
        assert listed == expected and {"job.submit", "knowledge.write"} <= set(listed)
        assert "fs.read" not in listed and "memory.add_fact" not in listed  # read-only; idempotent
        # a run whose tools change nothing forks without --yes
        at = (await store.read_stream(run_stream(read_only.run_id)))[0].position
        forked = await fork_run(runs, read_only.run_id, at, confirmed=False)
    assert forked.outcome.status == "completed"


def test_a_replaced_reply_was_sent_to_no_provider_so_it_keeps_no_sent_max_tokens() -> None:
    clamped = RunLlmTurn(seq=3, request_hash="h", model="m", message_count=1, sent_max_tokens=100,
                         reply=RecordedReply(content="cut", finish_reason="length"), usage=Tokens(input=5, output=100))
    record = Recorded(position=9, stream=run_stream("r"), version=3, type="run.llm_turn", event=clamped, recorded_at=0.0)
    new, replaced = replace_observation(record, reply_replacement("given"))
    assert new.reply.content == "given" and new.sent_max_tokens is None and new.usage == Tokens()
    assert replaced.original_hash == observation_hash(clamped)
