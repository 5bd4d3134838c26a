from __future__ import annotations

import hashlib
import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gormes.providers import (
    InvalidModelReply,
    Message,
    ModelRequest,
    ProviderError,
    ToolCall,
    ToolSpec,
    UnknownProvider,
    Usage,
    open_provider,
    parse_tool_arguments,
    request_hash,
)
from gormes.providers.base import request_hash_v1, same_request
from gormes.errors import GormesError, UserError

CALL = ToolCall(id="call_1", name="fs.read", arguments='{"path": "README.md"}')
TOOL = ToolSpec(name="fs.read", description="Read a file", parameters={"type": "object", "properties": {"path": {"type": "string"}}})
REQUEST = ModelRequest(
    model="gpt-test",
    messages=(
        Message(role="system", content="You are terse."),
        Message(role="user", content="Read the README", name="ana"),
        Message(role="assistant", content="", tool_calls=(CALL,)),
        Message(role="tool", content="# gormes", tool_call_id="call_1", name="fs.read"),
    ),
    tools=(TOOL,),
    temperature=0.2,
    max_tokens=500,
)


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def test_request_hash_is_pinned():
    # Recorded runs store these hashes; if one changes, every run recorded under that
    # scheme diverges on replay.
    assert request_hash(REQUEST) == "v2:32131bb8ad8f3b8ba96f2e6784cdb55a3c0e02e00f00d2d3ad2ee1c2bd5de003"
    assert request_hash_v1(REQUEST) == "622197c5daba3ae06ed2987f4612fe01b3242d5aa8bb80134d0fe62a2fa278cc"


def test_request_hash_is_sha256_of_sorted_compact_json_with_the_tools_as_their_digest():
    whole = msgspec.to_builtins(REQUEST)
    tools_digest = hashlib.sha256(_canonical(whole["tools"])).hexdigest()
    assert request_hash(REQUEST) == "v2:" + hashlib.sha256(_canonical({**whole, "tools": tools_digest})).hexdigest()
    assert request_hash_v1(REQUEST) == hashlib.sha256(_canonical(whole)).hexdigest()


@pytest.mark.parametrize("tools", [(), (TOOL,)])
def test_a_recorded_hash_of_either_scheme_matches_its_request_and_no_other(tools):
    request = msgspec.structs.replace(REQUEST, tools=tools)
    other = msgspec.structs.replace(request, max_tokens=501)
    digest = request_hash(request)
    for recorded in (digest, request_hash_v1(request)):
        assert same_request(recorded, digest, request)
        assert not same_request(recorded, request_hash(other), other)
    # a hash marked v2 is never compared by the first scheme
    assert not same_request("v2:" + request_hash_v1(request), digest, request)


def test_request_hash_ignores_dict_key_order():
    reordered = msgspec.structs.replace(
        REQUEST,
        tools=(ToolSpec(name="fs.read", description="Read a file", parameters={"properties": {"path": {"type": "string"}}, "type": "object"}),),
    )
    assert request_hash(reordered) == request_hash(REQUEST)


def _with_message(index: int, **changes) -> ModelRequest:
    messages = list(REQUEST.messages)
    messages[index] = msgspec.structs.replace(messages[index], **changes)
    return msgspec.structs.replace(REQUEST, messages=tuple(messages))


VARIANTS = {
    "model": msgspec.structs.replace(REQUEST, model="gpt-test-2"),
    "temperature": msgspec.structs.replace(REQUEST, temperature=0.3),
    "temperature unset": msgspec.structs.replace(REQUEST, temperature=None),
    "max_tokens": msgspec.structs.replace(REQUEST, max_tokens=501),
    "max_tokens unset": msgspec.structs.replace(REQUEST, max_tokens=None),
    "a message fewer": msgspec.structs.replace(REQUEST, messages=REQUEST.messages[:-1]),
    "role": _with_message(1, role="system"),
    "content": _with_message(0, content="You are verbose."),
    "message name": _with_message(1, name="bob"),
    "tool_call_id": _with_message(3, tool_call_id="call_2"),
    "tool call id": _with_message(2, tool_calls=(msgspec.structs.replace(CALL, id="call_9"),)),
    "tool call name": _with_message(2, tool_calls=(msgspec.structs.replace(CALL, name="fs.list"),)),
    "tool call arguments": _with_message(2, tool_calls=(msgspec.structs.replace(CALL, arguments='{"path": "x"}'),)),
    "no tools": msgspec.structs.replace(REQUEST, tools=()),
    "tool name": msgspec.structs.replace(REQUEST, tools=(msgspec.structs.replace(TOOL, name="fs.grep"),)),
    "tool description": msgspec.structs.replace(REQUEST, tools=(msgspec.structs.replace(TOOL, description="Read"),)),
    "tool parameters": msgspec.structs.replace(REQUEST, tools=(msgspec.structs.replace(TOOL, parameters={"type": "object"}),)),
}


@pytest.mark.parametrize("field", sorted(VARIANTS))
def test_request_hash_changes_with_every_field(field):
    assert request_hash(VARIANTS[field]) != request_hash(REQUEST)


texts = st.text(max_size=20)
calls = st.builds(ToolCall, id=texts, name=texts, arguments=texts)
messages = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=texts,
    tool_calls=st.tuples() | st.tuples(calls),
    tool_call_id=st.none() | texts,
    name=st.none() | texts,
)
requests = st.builds(
    ModelRequest,
    model=texts,
    messages=st.lists(messages, max_size=3).map(tuple),
    tools=st.lists(st.builds(ToolSpec, name=texts, description=texts, parameters=st.dictionaries(texts, st.integers())), max_size=2).map(tuple),
    temperature=st.none() | st.floats(0, 2),
    max_tokens=st.none() | st.integers(1, 10_000),
)


@given(requests, requests)
def test_request_hash_equal_exactly_for_equal_requests(a, b):
    roundtrip = msgspec.json.decode(msgspec.json.encode(a), type=ModelRequest)
    assert request_hash(roundtrip) == request_hash(a)
    assert (request_hash(a) == request_hash(b)) == (a == b)


def test_usage_adds_up():
    assert Usage(input=3, output=2, cache_read=1) + Usage(input=10, output=5) == Usage(input=13, output=7, cache_read=1)
    assert (Usage(input=3, output=2, cache_write=4) + Usage(input=1, output=1, cache_write=5)).cache_write == 9


def test_errors_belong_to_the_gormes_hierarchy():
    error = ProviderError("slow down", retryable=True, status=429)
    assert isinstance(error, GormesError) and error.retryable and error.status == 429
    assert error.retry_after is None
    assert ProviderError("slow down", retryable=True, status=429, retry_after=2.5).retry_after == 2.5
    invalid = InvalidModelReply("no choices")
    assert isinstance(invalid, ProviderError) and not invalid.retryable


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [("{not json", "not JSON"), ("[1, 2]", "not a JSON object"), ("", "not JSON")],
)
def test_tool_arguments_must_be_a_json_object(arguments, problem):
    with pytest.raises(InvalidModelReply, match=problem):
        parse_tool_arguments(ToolCall(id="c", name="t", arguments=arguments))
    assert parse_tool_arguments(CALL) == {"path": "README.md"}


@pytest.mark.parametrize("spec", ["anthropic:", "gpt-4o", "claude:x", "", "scripted:", "openai:"])
def test_open_provider_rejects_unknown_or_empty_specs(spec):
    with pytest.raises(UnknownProvider) as caught:
        open_provider(spec)
    assert isinstance(caught.value, UserError)
    assert "\n" not in str(caught.value) and repr(spec) in str(caught.value)
