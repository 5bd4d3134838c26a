"""The `openai:` provider against what the real API accepts: names on the wire,
the history it refuses, timeouts, connection errors and retry-after."""

from __future__ import annotations

import pytest
from openai_server import ChatServer, ErrorReply, Stall, TextReply, ToolCallsReply, request_problems

from gormes.errors import UserError
from gormes.providers import Message, ModelRequest, ProviderError, ToolCall, ToolSpec
from gormes.providers.openai import OpenAIProvider
from gormes.providers.wire_names import UnsendableToolName

SCHEMA = {"type": "object", "properties": {}}
TOOLS = (
    ToolSpec(name="fs.read", description="Read", parameters=SCHEMA),
    ToolSpec(name="mcp.time.get_current_time", description="Now", parameters=SCHEMA),
)


@pytest.fixture
def server():
    with ChatServer() as s:
        yield s


def provider_for(server: ChatServer, **config) -> OpenAIProvider:
    return OpenAIProvider("gpt-test", base_url=server.base_url, api_key="sk-test", env={}, **config)


def ask(*messages: Message, tools=TOOLS) -> ModelRequest:
    return ModelRequest(model="gpt-test", messages=(Message(role="user", content="go"), *messages), tools=tools)


async def test_names_go_out_as_wire_names_and_come_back_neutral(server):
    server.queue(ToolCallsReply([("c2", "mcp__time__get_current_time", "{}"), ("c3", "web__fetch", "{}")]))
    call = ToolCall(id="c1", name="fs.read", arguments="{}")
    history = (
        Message(role="assistant", content="", tool_calls=(call,)),
        Message(role="tool", content="text", tool_call_id="c1", name="fs.read"),
    )
    reply = await provider_for(server).complete(ask(*history))
    body = server.requests[0].body
    assert [t["function"]["name"] for t in body["tools"]] == ["fs__read", "mcp__time__get_current_time"]
    assert body["messages"][1]["tool_calls"][0]["function"]["name"] == "fs__read"
    assert body["messages"][2]["name"] == "fs__read"
    assert [c.name for c in reply.message.tool_calls] == ["mcp.time.get_current_time", "web.fetch"]
    assert server.rejections == []


@pytest.mark.parametrize(
    ("name", "why"),
    [("a." + "b" * 70, "over the limit of 64"), ("mcp.srv.get time", "characters the wire refuses: ' '")],
)
async def test_a_name_the_wire_cannot_carry_is_refused_before_sending(server, name, why):
    tools = (ToolSpec(name=name, description="x", parameters=SCHEMA),)
    with pytest.raises(UnsendableToolName, match=why) as caught:
        await provider_for(server).complete(ask(tools=tools))
    assert isinstance(caught.value, UserError) and isinstance(caught.value, ProviderError)
    assert not caught.value.retryable and repr(name) in str(caught.value)
    assert server.requests == []


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "fs.read"}}]}, "does not match pattern"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "Supported values"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "r", "tool_call_id": "c9"}]}, "must be a response"),
        ({"model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}, {"role": "user", "content": "x"}]}, "did not have response messages"),
        ({"model": "m", "messages": [{"role": "user"}]}, "Missing required parameter"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model parameter"),
        ({"model": "m", "messages": []}, "empty array"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": True}}, "stream_options"),
        ({"model": "m", "messages": [{"role": "user", "content": "x", "name": "ana bob"}]}, "name"),
    ],
)
def test_the_server_refuses_what_openai_refuses(body, problem):
    problems = request_problems(body)
    assert problems and problem in problems[0]


async def test_a_refused_request_fails_with_the_servers_reason(server):
    server.queue(TextReply("never sent"))
    dangling = Message(role="tool", content="r", tool_call_id="nobody")
    with pytest.raises(ProviderError, match="HTTP 400: .*must be a response") as caught:
        await provider_for(server).complete(ask(dangling))
    assert not caught.value.retryable and len(server.rejections) == 1


@pytest.mark.parametrize(("headers", "seconds"), [((("retry-after", "2"),), 2.0), ((("retry-after-ms", "1500"), ("retry-after", "9")), 1.5), ((), None)])
async def test_a_rate_limit_carries_the_wait_the_server_asked_for(server, headers, seconds):
    server.queue(ErrorReply(429, "Rate limit reached", headers=headers))
    with pytest.raises(ProviderError) as caught:
        await provider_for(server).complete(ask())
    assert caught.value.retryable and caught.value.status == 429 and caught.value.retry_after == seconds


async def test_a_timeout_says_it_timed_out_after_how_long_against_which_url(server):
    server.queue(Stall())
    provider = provider_for(server, timeout=0.5)
    with pytest.raises(ProviderError) as caught:
        await provider.complete(ask())
    assert str(caught.value) == f"openai:gpt-test: timed out after 0.5 s waiting for {server.base_url}/chat/completions"
    assert caught.value.retryable


async def test_a_connection_error_names_the_url_and_the_cause():
    with ChatServer() as stopped:
        url = stopped.base_url
    with pytest.raises(ProviderError) as caught:
        await OpenAIProvider("gpt-test", base_url=url, api_key="k", env={}).complete(ask())
    text = str(caught.value)
    assert text.startswith(f"openai:gpt-test: cannot reach {url}/chat/completions: ")
    assert len(text) > len(f"openai:gpt-test: cannot reach {url}/chat/completions: ") + 5


def test_the_timeout_comes_from_the_argument_then_the_environment_then_120():
    assert OpenAIProvider("m", base_url="http://x/v1", env={}).timeout == 120.0
    assert OpenAIProvider("m", base_url="http://x/v1", env={"GORMES_MODEL_TIMEOUT": "7.5"}).timeout == 7.5
    assert OpenAIProvider("m", base_url="http://x/v1", timeout=3, env={"GORMES_MODEL_TIMEOUT": "7.5"}).timeout == 3.0
    for bad in ("soon", "0", "-1"):
        with pytest.raises(UserError, match="GORMES_MODEL_TIMEOUT"):
            OpenAIProvider("m", base_url="http://x/v1", env={"GORMES_MODEL_TIMEOUT": bad})
