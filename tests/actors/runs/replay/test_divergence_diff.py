"""A divergence names what differs: the message and field of a model request, the
tools offered, a tool call's operation and arguments. Runs are recorded here live
(real store, real executor, scripted model), then replayed with changed code."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import changed_handlers as changed
from replay_helpers import MANIFEST, fixture_path

from gormes.actors.runs.context import RunContext, RunHandlerRegistry, run_handlers
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns, FileRuns
from gormes.actors.runs.replay import replay
from gormes.actors.runs.replay_report import Difference
from gormes.events.runs import RunLlmTurn, run_stream
from gormes.ops.executor import Executor
from gormes.ops.registry import Registry
from gormes.providers.base import Message, ModelRequest, ToolCall
from gormes.tools.builtin import default_registry


def call(name: str, **arguments: Any) -> dict:
    return {"name": name, "arguments": arguments}


def write_script(path: Path, *replies: dict) -> str:
    path.write_text(json.dumps({"model": "scripted", "agents": [{"replies": list(replies)}]}))
    return f"scripted:{path}"


def handlers_with(**fns: Any) -> RunHandlerRegistry:
    handlers = run_handlers.copy()
    for name, fn in fns.items():
        handlers.register(name.replace("_", "."), fn)
    return handlers


async def record(store, workspace: Path, model: str, handler: str, input: Any, *,
                 handlers: RunHandlerRegistry = run_handlers, tools: tuple[str, ...] | None = None) -> str:
    executor = Executor(default_registry(), store, workspace=workspace)
    async with RunManager.open(store, executor=executor, handlers=handlers) as runs:
        outcome = await runs.run(handler, input, model=model, tools=tools)
    assert outcome.status == "completed", outcome.error
    return outcome.run_id


async def replayed(db_path: Path, run_id: str, handlers: RunHandlerRegistry, registry: Registry | None = None):
    with DatabaseRuns(db_path) as source:
        return await replay(source, run_id, registry=registry or default_registry(), handlers=handlers)


# -- a model request ----------------------------------------------------------------------


async def test_another_system_prompt_names_message_0_and_both_texts(store, db_path, tmp_path, workspace) -> None:
    model = write_script(tmp_path / "s.json", {"tool_calls": [call("fs.read", path="README.md")]}, {"text": "done"})
    run_id = await record(store, workspace, model, "agent", {"prompt": "Read it.", "system": "Be brief."},
                          tools=("fs.read",))
    assert (await replayed(db_path, run_id, run_handlers)).tree_exact

    report = await replayed(db_path, run_id, changed.registry_with("agent", changed.agent_with_another_prompt))
    d = report.divergence
    assert d.diff.kind == "llm"
    assert d.diff.differences == (Difference(
        what="message", path="messages[0].content", index=0, role="system",
        recorded='"Be brief."', asked='"Answer in one word."',
    ),)
    assert d.diff_lines() == ['message 0 (system) content: recorded "Be brief.", code asked "Answer in one word."']


def conversation(follow_up: str, *, rewrite_call: bool = False):
    """Two model turns: the prompt, then the reply and `follow_up`. `rewrite_call`:
    the code changes the arguments of the tool call the model made before sending
    them back (its conversation is not what the model said)."""

    async def handler(ctx: RunContext, input: Any) -> Any:
        messages = [Message(role="user", content=input["prompt"])]
        first = await ctx.llm(ModelRequest(model=ctx.model_name, messages=tuple(messages), tools=ctx.tool_schemas()))
        said = first.message
        if rewrite_call:
            said = Message(role="assistant", content=said.content, tool_calls=tuple(
                ToolCall(id=c.id, name=c.name, arguments='{"path": "notes/a.txt"}') for c in said.tool_calls
            ))
        messages += [said, Message(role="user", content=follow_up)]
        second = await ctx.llm(ModelRequest(model=ctx.model_name, messages=tuple(messages), tools=ctx.tool_schemas()))
        return second.message.content

    return handler


async def test_a_later_turn_names_its_message_rebuilt_from_the_chained_record(
        store, db_path, tmp_path, workspace) -> None:
    model = write_script(tmp_path / "s.json", {"tool_calls": [call("fs.read", path="README.md")]}, {"text": "ok"})
    run_id = await record(store, workspace, model, "two.turns", {"prompt": "Look."},
                          handlers=handlers_with(two_turns=conversation("x" * 100 + " slowly")),
                          tools=("fs.read",))
    turns = [r.event for r in await store.read_stream(run_stream(run_id)) if isinstance(r.event, RunLlmTurn)]
    # the second turn records only what is new: the reply and the follow-up
    assert [(t.request.shared, len(t.request.messages), t.request.tools is None) for t in turns] == [
        (0, 1, False), (1, 2, True),
    ]

    report = await replayed(db_path, run_id, handlers_with(two_turns=conversation("x" * 100 + " quickly")))
    (diff,) = report.divergence.diff.differences
    assert (diff.path, diff.index, diff.role) == ("messages[2].content", 2, "user")
    # both values cut to the same window, from 20 characters before where they differ
    assert (diff.recorded, diff.asked) == ('"…' + "x" * 19 + ' slowly"', '"…' + "x" * 19 + ' quickly"')
    assert report.divergence.seq == turns[1].seq

    report = await replayed(db_path, run_id, handlers_with(
        two_turns=conversation("x" * 100 + " slowly", rewrite_call=True)))
    (diff,) = report.divergence.diff.differences
    assert diff.line() == (
        'message 1 (assistant) tool_calls[0].arguments: recorded {"path":"README.md"}, '
        'code asked {"path": "notes/a.txt"}'
    )


async def test_the_tools_offered_name_added_removed_and_changed_schemas(store, db_path, tmp_path, workspace) -> None:
    model = write_script(tmp_path / "s.json", {"text": "nothing to do"})
    run_id = await record(store, workspace, model, "agent", {"prompt": "Hi."}, tools=("fs.read", "fs.list"))

    without_list = Registry([s for s in default_registry().list() if s.name != "fs.list"])
    report = await replayed(db_path, run_id, run_handlers, without_list)
    assert report.divergence.diff.differences == (Difference(what="tools", path="tools", removed=("fs.list",)),)
    assert report.divergence.diff_lines() == ["tools offered: removed fs.list"]

    reworded = Registry([
        dataclasses.replace(s, description="Read a file.") if s.name == "fs.read" else s
        for s in default_registry().list()
    ])
    report = await replayed(db_path, run_id, run_handlers, reworded)
    (diff,) = report.divergence.diff.differences
    assert (diff.path, diff.recorded != diff.asked) == ("tools[fs.read]", True)
    assert diff.line() == "tools offered: same names, different schema of fs.read"


# -- a tool call ------------------------------------------------------------------------------


def reader(arguments: dict, operation: str = "fs.read"):
    async def handler(ctx: RunContext, input: Any) -> Any:
        return (await ctx.tool(operation, arguments))["path"]

    return handler


async def test_a_tool_call_names_the_arguments_that_differ(store, db_path, workspace, tmp_path) -> None:
    run_id = await record(store, workspace, None, "reader", None,
                          handlers=handlers_with(reader=reader({"path": "README.md", "offset": 0})))

    report = await replayed(db_path, run_id, handlers_with(reader=reader({"path": "notes/a.txt", "max_bytes": 10})))
    d = report.divergence
    assert d.diff.kind == "tool"
    assert d.diff_lines() == [
        "argument max_bytes: only in the code: 10",
        "argument offset: only in the recording: 0",
        'argument path: recorded "README.md", code asked "notes/a.txt"',
    ]

    report = await replayed(db_path, run_id, handlers_with(reader=reader({"path": "README.md", "offset": 0},
                                                                           operation="fs.list")))
    assert report.divergence.diff_lines() == ["operation: recorded fs.read, code asked fs.list"]


# -- runs recorded before requests were kept ------------------------------------------------


def without_requests(name: str, tmp_path: Path) -> Path:
    """A fixture as a recording made before `request` was kept looks."""
    lines = [json.loads(line) for line in fixture_path(name).read_text().splitlines() if line.strip()]
    for line in lines:
        line["data"].pop("request", None)
    path = tmp_path / f"{name}-old.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


async def test_an_old_recording_replays_exactly_and_its_divergence_says_what_it_can(tmp_path) -> None:
    expected = MANIFEST["tool_error"]["replays"][0]
    old = without_requests("tool_error", tmp_path)
    report = await replay(FileRuns(old), expected["run_id"], registry=default_registry())
    assert report.tree_exact and report.total_events == expected["events"]

    report = await replay(FileRuns(old), expected["run_id"], registry=default_registry(),
                          handlers=changed.registry_with("agent", changed.agent_with_another_prompt))
    diff = report.divergence.diff
    assert diff.differences == (Difference(what="message count", path="messages", recorded="1", asked="2"),)
    assert "hash only" in diff.note


async def test_a_fixture_recorded_with_requests_names_the_message(tmp_path) -> None:
    expected = MANIFEST["tool_error"]["replays"][0]
    report = await replay(FileRuns(fixture_path("tool_error")), expected["run_id"], registry=default_registry(),
                          handlers=changed.registry_with("agent", changed.agent_with_another_prompt))
    first = report.divergence.diff.differences[0]
    assert (first.path, first.recorded, first.asked) == ("messages[0].role", "user", "system")
