from __future__ import annotations

import json

import pytest
import trio
from call_deadline import deadline_once_received
from openai_server import (
    ChatServer,
    ErrorReply,
    RawBody,
    RawStream,
    TextReply,
    ToolCallsReply,
)

from gormes.providers import (
    InvalidModelReply,
    Message,
    ModelReply,
    ModelRequest,
    ProviderError,
    ToolCall,
    ToolSpec,
    Usage,
    open_provider,
)
from gormes.providers.openai import OpenAIProvider
from gormes.errors import UserError

READ = ToolSpec(
    name="fs.read",
    description="Read a file inside the workspace",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
ASK = ModelRequest(
    model="gpt-test",
    messages=(Message(role="system", content="Be brief."), Message(role="user", content="What is gormes?")),
    tools=(READ,),
)


@pytest.fixture
def server():
    with ChatServer() as s:
        yield s


def provider_for(server: ChatServer, **config) -> OpenAIProvider:
    return OpenAIProvider("gpt-test", base_url=server.base_url, api_key="sk-test", env={}, **config)


async def test_streamed_text_is_assembled_with_usage_from_the_final_chunk(server):
    server.queue(TextReply("An event-sourced actor runtime.", prompt_tokens=31, completion_tokens=8, cached_tokens=16))
    reply = await provider_for(server).complete(ASK)
    assert reply == ModelReply(
        message=Message(role="assistant", content="An event-sourced actor runtime."),
        usage=Usage(input=31, output=8, cache_read=16),
        finish_reason="stop",
        model="gpt-test-2025-01-01",
    )
    [received] = server.requests
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == "Bearer sk-test"
    assert received.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is gormes?"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {"name": "fs__read", "description": READ.description, "parameters": READ.parameters},
            }
        ],
    }


async def test_streamed_tool_calls_are_assembled_from_fragments(server):
    calls = [
        ("call_a", "fs__read", json.dumps({"path": "docs/events.md"})),
        ("call_b", "fs__grep", json.dumps({"pattern": "actor", "root": "docs", "max": 20})),
    ]
    server.queue(ToolCallsReply(calls, text="Looking.", fragment=3))
    reply = await provider_for(server).complete(ASK)
    assert reply.message.content == "Looking."
    # fs.read was offered (exact reverse); fs.grep was not (best effort, so the run can deny it)
    neutral = ["fs.read", "fs.grep"]
    assert reply.message.tool_calls == tuple(ToolCall(id=i, name=n, arguments=a) for (i, _, a), n in zip(calls, neutral))
    assert reply.finish_reason == "tool_calls"
    assert reply.usage == Usage(input=20, output=9)


async def test_a_whole_conversation_goes_out_in_the_wire_shape(server):
    server.queue(TextReply("The README says hello."))
    call = ToolCall(id="call_a", name="fs.read", arguments='{"path":"README.md"}')
    request = ModelRequest(
        model="gpt-test",
        messages=(
            Message(role="user", content="Read it", name="ana"),
            Message(role="assistant", content="", tool_calls=(call,)),
            Message(role="tool", content="hello", tool_call_id="call_a"),
        ),
        temperature=0.0,
        max_tokens=64,
    )
    await provider_for(server, stream=False).complete(request)
    body = server.requests[0].body
    assert body["messages"] == [
        {"role": "user", "content": "Read it", "name": "ana"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "fs__read", "arguments": '{"path":"README.md"}'}}],
        },
        {"role": "tool", "content": "hello", "tool_call_id": "call_a"},
    ]
    assert body["temperature"] == 0.0 and body["max_tokens"] == 64
    assert body["stream"] is False and "stream_options" not in body and "tools" not in body


async def test_non_streaming_text_and_tool_calls(server):
    server.queue(TextReply("plain", prompt_tokens=5, completion_tokens=1, cached_tokens=2))
    server.queue(ToolCallsReply([("call_z", "time__now", "{}")]))
    provider = provider_for(server, stream=False)
    text = await provider.complete(ASK)
    assert (text.message.content, text.usage, text.finish_reason) == ("plain", Usage(input=5, output=1, cache_read=2), "stop")
    tools = await provider.complete(ASK)
    assert tools.message == Message(role="assistant", content="", tool_calls=(ToolCall(id="call_z", name="time.now", arguments="{}"),))
    assert [r.headers["accept"] for r in server.requests] == ["application/json"] * 2


async def test_a_server_that_reports_no_usage_counts_zero(server):
    server.queue(TextReply("hi", send_usage=False))
    assert (await provider_for(server).complete(ASK)).usage == Usage(input=0, output=0)


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_rate_limits_and_server_errors_are_retryable(server, status):
    server.queue(ErrorReply(status, "Rate limit reached for gpt-test"))
    with pytest.raises(ProviderError) as caught:
        await provider_for(server).complete(ASK)
    assert caught.value.retryable and caught.value.status == status
    assert f"HTTP {status}: Rate limit reached for gpt-test" in str(caught.value)


async def test_a_rejected_request_is_not_retryable_and_says_why(server):
    server.queue(ErrorReply(400, "Invalid schema for function 'fs.read': 'object' is not valid."))
    with pytest.raises(ProviderError) as caught:
        await provider_for(server).complete(ASK)
    error = caught.value
    assert not error.retryable and error.status == 400 and not isinstance(error, InvalidModelReply)
    assert str(error) == "openai:gpt-test: HTTP 400: Invalid schema for function 'fs.read': 'object' is not valid."


async def test_an_error_body_that_is_not_json_is_shown_as_text(server):
    server.queue(ErrorReply(401, "", body="Unauthorized\n  (bad key)"))
    with pytest.raises(ProviderError, match=r"HTTP 401: Unauthorized \(bad key\)$") as caught:
        await provider_for(server).complete(ASK)
    assert not caught.value.retryable


@pytest.mark.parametrize(
    ("lines", "problem", "retryable"),
    [
        (['data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}', "data: {not json"], "malformed stream chunk", False),
        (['data: {"choices": "no"}'], "malformed stream chunk", False),
        (['data: {"choices": [], "usage": {"prompt_tokens": 1}}', "data: [DONE]"], "carried no choices", False),
        (['data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}'], "ended before the reply finished", True),
        (
            [
                'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "t", "arguments": "{\\"a\\": "}}]}}]}',
                'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}',
                "data: [DONE]",
            ],
            "arguments of tool call 't' are not JSON",
            False,
        ),
        (
            [
                'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}',
                'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}',
            ],
            "tool call #0 has no function name",
            False,
        ),
    ],
)
async def test_a_malformed_stream_is_an_invalid_reply(server, lines, problem, retryable):
    server.queue(RawStream(lines))
    with pytest.raises(InvalidModelReply, match=problem) as caught:
        await provider_for(server).complete(ASK)
    assert caught.value.retryable is retryable


async def test_an_error_event_inside_a_stream_is_a_retryable_provider_error(server):
    server.queue(RawStream(['data: {"error": {"message": "overloaded", "type": "server_error"}}']))
    with pytest.raises(ProviderError, match="server error: overloaded") as caught:
        await provider_for(server).complete(ASK)
    assert caught.value.retryable and not isinstance(caught.value, InvalidModelReply)


async def test_sse_comments_events_and_multiline_data_are_understood(server):
    server.queue(
        RawStream(
            [
                ": keep-alive",
                'event: message\nid: 1\ndata: {"model": "m-1", "choices": [{"index": 0,\ndata: "delta": {"content": "hel"}}]}',
                'data:{"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}',
                'data: {"choices": [{"index": 1, "delta": {"content": "other choice"}}]}',
                "data: [DONE]",
            ]
        )
    )
    reply = await provider_for(server).complete(ASK)
    assert (reply.message.content, reply.model, reply.finish_reason) == ("hello", "m-1", "stop")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('{"choices": []}', "the reply has no choices"),
        ("{\"choices\": [{\"message\": {\"content\": \"x\"", "malformed reply"),
        ('{"choices": [{"message": {"tool_calls": [{"id": "c", "function": {"name": "t", "arguments": "[1]"}}]}}]}', "not a JSON object"),
    ],
)
async def test_a_malformed_whole_reply_is_an_invalid_reply(server, body, problem):
    server.queue(RawBody(body))
    with pytest.raises(InvalidModelReply, match=problem):
        await provider_for(server, stream=False).complete(ASK)


async def test_a_deadline_cancels_a_call_mid_stream(server):
    server.queue(TextReply("a slow and steady reply", fragment=2, pause=0.02), TextReply("next"))
    provider = provider_for(server)  # the stream takes at least 12 x 0.02 s once received
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(deadline_once_received, server, scope, 0.05)
            await provider.complete(ASK)
    assert scope.cancelled_caught
    assert (await provider.complete(ASK)).message.content == "next"


async def test_an_unreachable_server_is_retryable():
    with ChatServer() as stopped:
        url = stopped.base_url  # nothing listens on this port once the server stops
    provider = OpenAIProvider("gpt-test", base_url=url, api_key="k", env={})
    with pytest.raises(ProviderError, match="cannot reach") as caught:
        await provider.complete(ASK)
    assert caught.value.retryable


def test_configuration_from_arguments_then_gormes_env_then_openai_env():
    env = {
        "OPENAI_BASE_URL": "http://openai-env/v1",
        "OPENAI_API_KEY": "sk-openai",
        "GORMES_OPENAI_BASE_URL": "http://gormes-env/v1/",
        "GORMES_OPENAI_API_KEY": "sk-gormes",
    }
    provider = OpenAIProvider("m", env=env)
    assert (provider.base_url, provider.api_key) == ("http://gormes-env/v1", "sk-gormes")
    provider = OpenAIProvider("m", env={k: v for k, v in env.items() if k.startswith("OPENAI")})
    assert (provider.base_url, provider.api_key) == ("http://openai-env/v1", "sk-openai")
    provider = OpenAIProvider("m", base_url="http://arg/v1", api_key="sk-arg", env=env)
    assert (provider.base_url, provider.api_key) == ("http://arg/v1", "sk-arg")


def test_openai_itself_needs_a_key_but_a_local_server_does_not():
    with pytest.raises(UserError, match="no API key"):
        OpenAIProvider("gpt-4o", env={})
    assert OpenAIProvider("llama", env={"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"}).api_key is None


async def test_a_server_without_a_key_gets_no_authorization_header(server):
    server.queue(TextReply("ok"))
    await OpenAIProvider("local", base_url=server.base_url, env={}).complete(ASK)
    assert "authorization" not in server.requests[0].headers


async def test_open_provider_opens_an_openai_client(server):
    server.queue(TextReply("ok"))
    provider = open_provider("openai:gpt-test", base_url=server.base_url, api_key="sk-test")
    assert (provider.name, provider.model) == ("openai:gpt-test", "gpt-test")
    assert (await provider.complete(ASK)).message.content == "ok"
