"""A Python caller's lone surrogate in an operation's input (decision 0077).

JSON text cannot carry a lone surrogate (U+D800-U+DFFF alone: no character, and
UTF-8 cannot encode it; msgspec refuses `"\\ud800"` unpaired), so no MCP client or
model can send one. A Python caller's str can hold one: a run's handler, a
program calling `Executor.call` with a dict, and Python itself makes them of
undecodable bytes (`os.listdir` of a file name that is not UTF-8, an argument).
`Executor.call` given one in a dict or a Struct raised `UnicodeEncodeError` from
its digest of the input and audited the call `error`; a run's `ctx.tool` raised
it into the handler, nothing audited. It is invalid input now, naming the field,
audited `invalid`, and nothing is written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import audit_events

from gormes.actors.runs.context import ToolCallFailed, run_handler
from gormes.actors.runs.manager import RunManager
from gormes.errors import UserError
from gormes.events.runs import run_stream
from gormes.ops.executor import Executor
from gormes.ops.input_text import surrogate_at
from gormes.ops.spec import Caller, InvalidOperationInput
from gormes.tools.builtin import default_registry
from gormes.tools.memory import RememberInput

# (operation, input, what the refusal names)
SURROGATE_INPUTS: list[tuple[str, Any, str]] = [
    ("memory.remember", {"fact": "x\ud800y"}, "input.fact holds U+D800, a lone surrogate"),
    ("memory.remember", {"relation": {"subject": "a", "predicate": "p", "object": "\udfff"}},
     "input.relation.object holds U+DFFF"),
    ("memory.remember", RememberInput(fact="f", subject="s\udc80"), "input.subject holds U+DC80"),
    ("job.submit", {"name": "echo", "data": {"text": ["ok", "\udc00"]}}, "input.data[][1] holds U+DC00"),
    ("job.submit", {"name": "echo", "data": {"k\ud800": 1}}, "input.data key holds U+D800"),
    ("memory.remember", '{"fact": "x\ud800"}', "the text holds U+D800, a lone surrogate, at character 11"),
]


@pytest.mark.parametrize("operation, raw, named", SURROGATE_INPUTS,
                         ids=["field", "nested field", "struct", "free data", "free data key", "text"])
@pytest.mark.parametrize("trust", ["operator", "gateway"])
async def test_a_lone_surrogate_is_invalid_input_named_and_audited(store, trust: str, operation: str, raw: Any,
                                                                  named: str):
    executor = Executor(default_registry(), store)
    with pytest.raises(InvalidOperationInput, match="which UTF-8 cannot encode") as refused:
        await executor.call(operation, raw, Caller(trust=trust, id="caller-1"))
    assert named in str(refused.value), refused.value
    assert str(refused.value).encode()  # the message names it, never holds it
    assert [r.type for r in await store.read_all()] == ["audit.operation"], "nothing but the audit is written"
    [audit] = await audit_events(store)
    assert (audit.operation, audit.allowed, audit.outcome) == (operation, False, "invalid")
    assert audit.error is not None and audit.error.startswith("InvalidOperationInput: "), audit.error


@pytest.mark.parametrize("data, why", [
    ({"x": object()}, "Encoding objects of type object is unsupported"),
    ({1: "one"}, "Only dicts with str keys are supported"),
], ids=["object", "int key"])
async def test_a_python_callers_free_data_that_is_no_json_is_invalid_too(store, data: Any, why: str):
    # The same door, the same digest: a TypeError there was audited `error`.
    executor = Executor(default_registry(), store)
    with pytest.raises(InvalidOperationInput, match=f"invalid input for job.submit: not JSON: {why}"):
        await executor.call("job.submit", {"name": "echo", "data": data}, Caller(trust="operator", id="caller-1"))
    assert [(a.outcome, a.allowed) for a in await audit_events(store)] == [("invalid", False)]
    assert [r.type for r in await store.read_all()] == ["audit.operation"]


async def test_the_same_input_without_it_is_taken(store):
    executor = Executor(default_registry(), store)
    await executor.call("memory.remember", {"fact": "x\U0001f600y"}, Caller(trust="gateway", id="caller-1"))
    assert [a.outcome for a in await audit_events(store)] == ["ok"]


@run_handler("test.lone_surrogate_tool_calls")
async def surrogate_handler(ctx: Any, input: Any) -> list[str]:
    """Reads the files of a directory as Python lists them: a name whose bytes are
    not UTF-8 comes decoded with `surrogateescape`. Given as a dict and as JSON
    text, then a file of a UTF-8 name."""
    [name] = [n for n in os.listdir(input["dir"]) if n != "README.md"]
    outcomes = []
    for arguments in ({"path": name}, '{"path": "' + name + '"}', {"path": "README.md"}):
        try:
            await ctx.tool("fs.read", arguments)
            outcomes.append("ok")
        except ToolCallFailed as exc:
            outcomes.append(f"{exc.outcome}: {exc}")
    return outcomes


async def test_a_runs_tool_call_with_a_lone_surrogate_is_refused_audited_and_the_run_goes_on(store, tmp_path: Path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("hello")
    (workspace / os.fsdecode(b"caf\xe9.txt")).write_text("a Latin-1 name")  # "caf\udce9.txt"
    executor = Executor(default_registry(), store, workspace=workspace)
    async with RunManager.open(store, executor=executor) as runs:
        outcome = await runs.run("test.lone_surrogate_tool_calls", {"dir": str(workspace)}, tools=["fs.read"])
    assert outcome.status == "completed", outcome.error
    first, second, third = outcome.result
    for refused, where in ((first, "arguments[]"), (second, "arguments")):  # a dict names no key
        assert refused.startswith("error: ") and "arguments are not JSON" in refused, refused
        assert f"{where} holds U+DCE9, a lone surrogate" in refused, refused
    assert third == "ok"
    calls = [r.event for r in await store.read_stream(run_stream(outcome.run_id)) if r.type == "run.tool_called"]
    assert [(c.outcome, c.error_type) for c in calls] == [("error", "InvalidArguments")] * 2 + [("ok", None)]
    assert "\\udce9" in calls[0].arguments and "\\udce9" in calls[1].arguments, "recorded as given, escaped"
    assert [(a.operation, a.outcome) for a in await audit_events(store)] == [
        ("fs.read", "invalid"), ("fs.read", "invalid"), ("fs.read", "ok"),
    ]


async def test_a_run_given_a_lone_surrogate_is_refused_as_input_that_is_not_json(store):
    async with RunManager.open(store) as runs:
        with pytest.raises(UserError, match=r"run input is not JSON-encodable: run input\[\] holds U\+DCE9"):
            await runs.run("test.lone_surrogate_tool_calls", {"dir": os.fsdecode(b"caf\xe9")})
    assert not await store.read_all()


def test_the_field_is_found_in_a_value_that_holds_a_cycle():
    value: dict[str, Any] = {"name": "echo"}
    value["self"] = value
    value["data"] = ["ok", {"k": "\udc80"}]
    assert surrogate_at(value) == ("input[][1][]", "U+DC80")
    looped: list[Any] = []
    looped.append(looped)
    assert surrogate_at(looped) is None
