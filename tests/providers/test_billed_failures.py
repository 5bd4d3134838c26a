"""A reply the API billed and gormes could not use carries its usage (decision
0069): the provider raises `InvalidModelReply` with `usage` set to what the
server reported, so the run can count the tokens it was charged. Tested against
the local stand-ins, which stop at the request's max_tokens as the APIs do."""

from __future__ import annotations

import msgspec
import pytest
from anthropic_server import MessagesServer, RawEvents, Reply
from openai_server import ChatServer, ErrorReply, RawStream, ToolCallsReply

from gormes.providers import InvalidModelReply, Message, ModelRequest, ProviderError, ToolSpec, Usage
from gormes.providers.anthropic import AnthropicProvider
from gormes.providers.openai import OpenAIProvider
from gormes.providers.scripted import ScriptedProvider, load_script

WRITE = ToolSpec(
    name="fs.write",
    description="Write a file inside the workspace",
    parameters={"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}},
)
LONG_ARGUMENTS = '{"path": "out.txt", "content": "' + "word " * 200 + '"}'


def ask(model: str, max_tokens: int | None = None) -> ModelRequest:
    return ModelRequest(model=model, messages=(Message(role="user", content="write it"),), tools=(WRITE,),
                        max_tokens=max_tokens)


@pytest.mark.parametrize("stream", [True, False])
async def test_openai_a_tool_call_cut_at_max_tokens_raises_with_the_usage_billed(stream):
    with ChatServer() as server:
        server.queue(ToolCallsReply([("call_1", "fs_write", LONG_ARGUMENTS)], prompt_tokens=40, completion_tokens=260))
        provider = OpenAIProvider("gpt-test", base_url=server.base_url, api_key="sk-test", env={}, stream=stream)
        with pytest.raises(InvalidModelReply, match="not JSON") as raised:
            await provider.complete(ask("gpt-test", max_tokens=10))
    assert server.rejections == []
    assert raised.value.usage == Usage(input=40, output=10)


async def test_openai_a_stream_cut_before_its_usage_chunk_carries_none():
    # OpenAI sends the usage last (stream_options.include_usage): a stream that breaks
    # off before it reported nothing, so nothing is counted
    head = 'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}'
    with ChatServer() as server:
        server.queue(RawStream([head]))
        provider = OpenAIProvider("gpt-test", base_url=server.base_url, api_key="sk-test", env={}, stream=True)
        with pytest.raises(InvalidModelReply, match="ended before") as raised:
            await provider.complete(ask("gpt-test"))
    assert raised.value.usage is None


async def test_openai_an_http_error_carries_no_usage():
    with ChatServer() as server:
        server.queue(ErrorReply(400, "bad request"))
        provider = OpenAIProvider("gpt-test", base_url=server.base_url, api_key="sk-test", env={}, stream=False)
        with pytest.raises(ProviderError) as raised:
            await provider.complete(ask("gpt-test"))
    assert raised.value.usage is None


async def test_anthropic_a_tool_use_cut_at_max_tokens_raises_with_the_usage_billed():
    cut = LONG_ARGUMENTS[:60]  # the stream stops inside the input's JSON: stop_reason max_tokens
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(Reply(tools=[("toolu_1", "fs_write", cut)], stop_reason="max_tokens", input_tokens=33,
                           output_tokens=16, cache_read=5))
        provider = AnthropicProvider("claude-test", base_url=server.base_url, api_key="sk-ant-test", env={},
                                     stream=True)
        with pytest.raises(InvalidModelReply, match="not JSON") as raised:
            await provider.complete(ask("claude-test", max_tokens=16))
    assert raised.value.usage == Usage(input=38, output=16, cache_read=5)


async def test_anthropic_a_stream_that_breaks_off_carries_the_input_it_was_billed():
    start = {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": [],
        "stop_reason": None, "usage": {"input_tokens": 21, "output_tokens": 1}}}
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(RawEvents([("message_start", msgspec.json.encode(start).decode())]))
        provider = AnthropicProvider("claude-test", base_url=server.base_url, api_key="sk-ant-test", env={},
                                     stream=True)
        with pytest.raises(InvalidModelReply, match="ended before") as raised:
            await provider.complete(ask("claude-test"))
    assert raised.value.retryable
    assert raised.value.usage == Usage(input=21, output=1)


async def test_scripted_a_tool_call_cut_at_max_tokens_raises_with_the_usage_an_api_bills(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(msgspec.json.encode({"agents": [{"replies": [
        {"tool_calls": [{"name": "fs.write", "arguments": {"path": "out.txt", "content": "word " * 200}}]},
    ]}]}).decode())
    provider = ScriptedProvider(load_script(path), name=f"scripted:{path}")
    with pytest.raises(InvalidModelReply, match="not JSON") as raised:
        await provider.complete(ask("scripted", max_tokens=10))
    usage = raised.value.usage
    assert usage is not None and usage.output == 10 and usage.input > 0
