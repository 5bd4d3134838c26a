from __future__ import annotations

import json

import pytest
import trio
from anthropic_server import Error, MessagesServer, RawEvents, Reply, Stall, request_problems
from call_deadline import deadline_once_received

from gormes.errors import UserError
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
from gormes.providers.anthropic import AnthropicProvider

READ = ToolSpec(
    name="fs.read",
    description="Read a file inside the workspace",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
ASK = ModelRequest(
    model="claude-test",
    messages=(Message(role="system", content="Be brief."), Message(role="user", content="What is gormes?")),
    tools=(READ,),
)


@pytest.fixture
def server():
    with MessagesServer(require_key="sk-ant-test") as s:
        yield s


def provider_for(server: MessagesServer, **config) -> AnthropicProvider:
    return AnthropicProvider("claude-test", base_url=server.base_url, api_key="sk-ant-test", env={}, **config)


@pytest.mark.parametrize("stream", [True, False])
async def test_text_with_usage_counting_cached_prompt_tokens_as_input(server, stream):
    server.queue(Reply("An event-sourced actor runtime.", input_tokens=30, output_tokens=8, cache_creation=100, cache_read=900))
    reply = await provider_for(server, stream=stream).complete(ASK)
    assert reply == ModelReply(
        message=Message(role="assistant", content="An event-sourced actor runtime."),
        usage=Usage(input=1030, output=8, cache_read=900, cache_write=100),
        finish_reason="stop",
        model="claude-test-2025-01-01",
    )
    [received] = server.requests
    assert received.path == "/v1/messages" and received.headers["authorization"] == "Bearer sk-ant-test"
    assert received.body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "What is gormes?"}]}],
        "stream": stream,
        "tools": [{"name": "fs__read", "description": READ.description, "input_schema": READ.parameters}],
    }
    assert server.rejections == []


@pytest.mark.parametrize("stream", [True, False])
async def test_tool_use_blocks_come_back_as_neutral_tool_calls(server, stream):
    # compact JSON: what a whole reply's `input` object encodes to, and what a stream sends
    path = json.dumps({"path": "docs/events.md"}, separators=(",", ":"))
    tools = [("toolu_1", "fs__read", path), ("toolu_2", "web__fetch", "{}")]
    server.queue(Reply("Looking.", tools=tools, fragment=3))
    reply = await provider_for(server, stream=stream).complete(ASK)
    assert reply.message == Message(
        role="assistant",
        content="Looking.",
        tool_calls=(
            ToolCall(id="toolu_1", name="fs.read", arguments=path),
            ToolCall(id="toolu_2", name="web.fetch", arguments="{}"),
        ),
    )
    assert reply.finish_reason == "tool_calls"


async def test_a_conversation_goes_out_as_alternating_turns_with_merged_tool_results(server):
    server.queue(Reply("Both read."))
    a = ToolCall(id="toolu.a", name="fs.read", arguments='{"path": "a"}')  # an id the wire refuses
    b = ToolCall(id="toolu_b", name="fs.read", arguments='{"path": "b"}')
    request = ModelRequest(
        model="claude-test",
        messages=(
            Message(role="system", content="Be brief."),
            Message(role="user", content="Read a and b"),
            Message(role="assistant", content="", tool_calls=(a, b)),
            Message(role="tool", content="text of a", tool_call_id="toolu.a", name="fs.read"),
            Message(role="tool", content="", tool_call_id="toolu_b", name="fs.read"),
            Message(role="user", content="[message from ana] hurry"),
        ),
        tools=(READ,),
        temperature=0.0,
        max_tokens=64,
    )
    await provider_for(server).complete(request)
    assert server.rejections == []
    body = server.requests[0].body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Read a and b"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_a", "name": "fs__read", "input": {"path": "a"}},
            {"type": "tool_use", "id": "toolu_b", "name": "fs__read", "input": {"path": "b"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "text of a"},
            {"type": "tool_result", "tool_use_id": "toolu_b"},
            {"type": "text", "text": "[message from ana] hurry"},
        ]},
    ]
    assert (body["system"], body["temperature"], body["max_tokens"]) == ("Be brief.", 0.0, 64)


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([{"role": "system", "content": "x"}, {"role": "user", "content": "x"}], 'Unexpected role "system"'),
        ([{"role": "assistant", "content": "x"}], "first message"),
        ([{"role": "user", "content": "x"}, {"role": "user", "content": "y"}], "alternate"),
        ([{"role": "user", "content": []}], "non-empty content"),
        ([{"role": "user", "content": [{"type": "text", "text": ""}]}], "non-empty"),
        ([{"role": "user", "content": "x"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "fs.read", "input": {}}]}], "should match pattern"),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "t", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9"}]},
            ],
            "corresponding `tool_use`",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "t", "input": {}}]},
                {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "tool_result", "tool_use_id": "t1"}]},
            ],
            "must come first",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "t", "input": {}}]},
                {"role": "user", "content": "no results"},
            ],
            "without `tool_result`",
        ),
    ],
)
def test_the_server_refuses_what_anthropic_refuses(messages, problem):
    problems = request_problems({"model": "m", "max_tokens": 10, "messages": messages})
    assert problems and problem in problems[0]
    assert "max_tokens" in request_problems({"model": "m", "messages": [{"role": "user", "content": "x"}]})[0]
    bad_tool = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "fs.read", "input_schema": {"type": "object"}}]}
    assert "should match pattern" in request_problems(bad_tool)[0]


async def test_a_refused_request_fails_with_the_servers_reason(server):
    server.queue(Reply("never sent"))
    request = ModelRequest(model="claude-test", messages=(Message(role="assistant", content="I start"),))
    with pytest.raises(ProviderError, match="HTTP 400: messages: first message") as caught:
        await provider_for(server).complete(request)
    assert not caught.value.retryable and caught.value.status == 400


@pytest.mark.parametrize(("status", "headers", "wait"), [(429, (("retry-after", "3"),), 3.0), (529, (("retry-after-ms", "250"),), 0.25), (500, (), None)])
async def test_rate_limits_and_overload_are_retryable_with_the_servers_wait(server, status, headers, wait):
    server.queue(Error(status, "rate_limit_error", "Number of requests has exceeded your rate limit", headers))
    with pytest.raises(ProviderError, match=f"HTTP {status}: Number of requests") as caught:
        await provider_for(server).complete(ASK)
    assert caught.value.retryable and caught.value.status == status and caught.value.retry_after == wait


async def test_an_error_event_inside_a_stream(server):
    start = json.dumps({"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}})
    error = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    server.queue(RawEvents([("message_start", start), ("error", error)]))
    with pytest.raises(ProviderError, match="server error: overloaded_error: Overloaded") as caught:
        await provider_for(server).complete(ASK)
    assert caught.value.retryable and not isinstance(caught.value, InvalidModelReply)


@pytest.mark.parametrize(
    ("events", "problem", "retryable"),
    [
        ([("message_start", "{not json")], "malformed stream event", False),
        ([("ping", '{"type": "ping"}')], "carried no message", False),
        ([("message_start", '{"type": "message_start", "message": {}}')], "ended before the reply finished", True),
        (
            [
                ("message_start", '{"type": "message_start", "message": {}}'),
                ("content_block_start", '{"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "x", "input": {}}}'),
                ("content_block_delta", '{"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\\"a\\": "}}'),
                ("message_stop", '{"type": "message_stop"}'),
            ],
            "arguments of tool call 'x' are not JSON",
            False,
        ),
    ],
)
async def test_a_malformed_stream_is_an_invalid_reply(server, events, problem, retryable):
    server.queue(RawEvents(events))
    with pytest.raises(InvalidModelReply, match=problem) as caught:
        await provider_for(server).complete(ASK)
    assert caught.value.retryable is retryable


@pytest.mark.parametrize(("stop", "finish"), [("max_tokens", "length"), ("stop_sequence", "stop"), ("refusal", "content_filter"), ("pause_turn", "pause_turn")])
async def test_stop_reasons_become_neutral_finish_reasons(server, stop, finish):
    server.queue(Reply("cut", stop_reason=stop))
    assert (await provider_for(server).complete(ASK)).finish_reason == finish


async def test_a_timeout_says_it_timed_out_after_how_long_against_which_url(server):
    server.queue(Stall())
    with pytest.raises(ProviderError) as caught:
        await provider_for(server, timeout=0.5).complete(ASK)
    assert str(caught.value) == f"anthropic:claude-test: timed out after 0.5 s waiting for {server.base_url}/v1/messages"


async def test_an_unreachable_server_names_the_url_and_is_retryable():
    with MessagesServer() as stopped:
        url = stopped.base_url
    with pytest.raises(ProviderError, match=f"cannot reach {url}/v1/messages: .+") as caught:
        await AnthropicProvider("claude-test", base_url=url, api_key="k", env={}).complete(ASK)
    assert caught.value.retryable


async def test_a_deadline_cancels_a_call_and_the_next_call_works(server):
    server.queue(Stall(), Reply("next"))
    provider = provider_for(server)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(deadline_once_received, server, scope, 0.1)
            await provider.complete(ASK)
    assert scope.cancelled_caught
    assert (await provider.complete(ASK)).message.content == "next"


def test_configuration_from_arguments_then_gormes_env_then_anthropic_env():
    env = {
        "ANTHROPIC_BASE_URL": "http://anthropic-env",
        "ANTHROPIC_API_KEY": "sk-a",
        "GORMES_ANTHROPIC_BASE_URL": "http://gormes-env/",
        "GORMES_ANTHROPIC_API_KEY": "sk-g",
        "GORMES_ANTHROPIC_MAX_TOKENS": "1000",
        "GORMES_MODEL_TIMEOUT": "9",
    }
    provider = AnthropicProvider("m", env=env)
    assert (provider.base_url, provider.api_key, provider.max_tokens, provider.timeout) == ("http://gormes-env", "sk-g", 1000, 9.0)
    provider = AnthropicProvider("m", env={k: v for k, v in env.items() if k.startswith("ANTHROPIC")})
    assert (provider.base_url, provider.api_key, provider.max_tokens, provider.timeout) == ("http://anthropic-env", "sk-a", 4096, 120.0)
    provider = AnthropicProvider("m", base_url="http://arg", api_key="sk-arg", max_tokens=10, timeout=1, env=env)
    assert (provider.base_url, provider.api_key, provider.max_tokens, provider.timeout) == ("http://arg", "sk-arg", 10, 1.0)
    with pytest.raises(UserError, match="GORMES_ANTHROPIC_MAX_TOKENS"):
        AnthropicProvider("m", base_url="http://arg", env={"GORMES_ANTHROPIC_MAX_TOKENS": "lots"})


def test_anthropic_itself_needs_a_key_but_a_local_server_does_not():
    with pytest.raises(UserError, match="no API key"):
        AnthropicProvider("claude", env={})
    assert AnthropicProvider("claude", env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/"}).api_key is None


async def test_a_server_without_a_key_gets_no_key_header():
    with MessagesServer() as server:
        server.queue(Reply("ok"))
        await AnthropicProvider("local", base_url=server.base_url, env={}).complete(ASK)
        assert "x-api-key" not in server.requests[0].headers and "authorization" not in server.requests[0].headers
        assert server.requests[0].headers["anthropic-version"]


async def test_open_provider_opens_an_anthropic_client(server):
    server.queue(Reply("ok"))
    provider = open_provider("anthropic:claude-test", base_url=server.base_url, api_key="sk-ant-test", timeout=None)
    assert (provider.name, provider.model) == ("anthropic:claude-test", "claude-test")
    assert (await provider.complete(ASK)).message.content == "ok"
