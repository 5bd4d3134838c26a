"""The request hash is the sha256 of msgspec's sorted JSON of the request with its
tools as their own sha256, however it is assembled (tools encoded and hashed once
per list of ToolSpecs); the first scheme's, of the whole request."""

from __future__ import annotations

import dataclasses
import hashlib

import msgspec
import pytest

from gormes.providers.base import (
    Message,
    ModelRequest,
    ToolCall,
    ToolSpec,
    request_hash,
    request_hash_v1,
    request_json,
    tools_json,
)
from gormes.actors.runs.live import tool_specs
from gormes.tools.builtin import default_registry

TOOLS = tool_specs(default_registry(), "operator", None)
MESSAGES = (
    Message(role="system", content="be brief"),
    Message(role="user", content='quotes " and \\ and \u2028 and \x00 and é'),
    Message(role="assistant", content="", tool_calls=(ToolCall(id="c1", name="time.now", arguments='{"b":1,"a":2}'),)),
    Message(role="tool", content='{"unix":1}', tool_call_id="c1", name="time.now"),
)


@pytest.mark.parametrize("tools", [(), TOOLS, TOOLS[:2], (ToolSpec(name="x", description="", parameters={"b": 1, "a": {"d": 2, "c": 3}}),)])
@pytest.mark.parametrize("temperature", [None, 0.0, 0.7])
@pytest.mark.parametrize("max_tokens", [None, 256])
def test_request_json_is_msgspec_sorted_json(tools: tuple[ToolSpec, ...], temperature: float | None, max_tokens: int | None) -> None:
    request = ModelRequest(model="scripted", messages=MESSAGES, tools=tools, temperature=temperature, max_tokens=max_tokens)
    expected = msgspec.json.encode(request, order="sorted")
    assert request_json(request) == expected
    assert request_json(request) == expected  # again, from the tool cache
    assert request_hash_v1(request) == hashlib.sha256(expected).hexdigest()
    assert tools_json(tools) == msgspec.json.encode(tools, order="sorted")
    tools_digest = hashlib.sha256(msgspec.json.encode(tools, order="sorted")).hexdigest()
    with_digest = msgspec.json.encode({**msgspec.to_builtins(request), "tools": tools_digest}, order="sorted")
    assert request_hash(request) == "v2:" + hashlib.sha256(with_digest).hexdigest()
    assert request_hash(request) == request_hash(request)  # again, from the tool cache


def test_a_run_s_tools_are_one_tuple_until_the_registry_changes() -> None:
    registry = default_registry()
    first = tool_specs(registry, "child-agent", ("time.now", "fs.read"))
    assert tool_specs(registry, "child-agent", ("time.now", "fs.read")) is first
    assert [t.name for t in first] == [s.name for s in registry.tool_schemas("child-agent", ("time.now", "fs.read"))]
    from gormes.tools.time import SPECS

    fresh = dataclasses.replace(SPECS[0], name="time.other")
    registry.register(fresh)
    assert tool_specs(registry, "child-agent", None) == tuple(
        ToolSpec(name=s.name, description=s.description, parameters=s.parameters)
        for s in registry.tool_schemas("child-agent")
    )
