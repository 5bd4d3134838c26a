"""A reply the API billed and gormes could not use carries its usage (decision
0069): the provider raises `InvalidModelReply` with `usage` set to what the
server reported, so the run can count the tokens it was charged; and any
`ProviderError` raised while a stream is read carries what the stream had
reported (its addendum). Tested against the local stand-ins, which stop at the
request's max_tokens and fail mid-stream as the APIs do."""

from __future__ import annotations

import msgspec
import pytest
from anthropic_server import Dropped, ErrorMidStream, Garbled, MessagesServer, RawEvents, Reply, stream_events
from openai_server import ChatServer, ErrorReply, RawStream, TextReply, ToolCallsReply
from openai_server import Garbled as GarbledChunks

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


# -- a failure raised while the stream is read (decision 0069's addendum) -----------


def anthropic_provider(server: MessagesServer) -> AnthropicProvider:
    return AnthropicProvider("claude-test", base_url=server.base_url, api_key="sk-ant-test", env={}, stream=True)


async def test_anthropic_an_error_event_after_message_start_carries_the_input_it_was_billed():
    # the API's `overloaded_error` mid-stream: message_start had reported the input
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(ErrorMidStream(Reply("never sent", input_tokens=40, cache_read=8, cache_creation=2)))
        with pytest.raises(ProviderError, match="server error: overloaded_error: Overloaded") as raised:
            await anthropic_provider(server).complete(ask("claude-test"))
    assert raised.value.retryable and not isinstance(raised.value, InvalidModelReply)
    assert raised.value.usage == Usage(input=50, output=1, cache_read=8, cache_write=2)


async def test_anthropic_an_error_event_after_the_output_began_carries_the_output_so_far():
    reply = Reply("Hello, this is cut", input_tokens=40, output_tokens=9)
    delta = {"type": "message_delta", "delta": {"stop_reason": None}, "usage": {"output_tokens": 5}}
    error = {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}
    events = stream_events(reply)[:4] + [("message_delta", msgspec.json.encode(delta).decode()),
                                         ("error", msgspec.json.encode(error).decode())]
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(RawEvents(events))
        with pytest.raises(ProviderError, match="api_error") as raised:
            await anthropic_provider(server).complete(ask("claude-test"))
    assert raised.value.usage == Usage(input=40, output=5)


async def test_anthropic_an_error_event_before_message_start_carries_none():
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(ErrorMidStream(Reply("x"), after=0))
        with pytest.raises(ProviderError, match="overloaded_error") as raised:
            await anthropic_provider(server).complete(ask("claude-test"))
    assert raised.value.usage is None


async def test_anthropic_a_malformed_event_carries_what_the_whole_stream_reported():
    # the stream goes on after the bad event (it is read to its end): its message_delta
    # reports the output the API billed
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(Garbled(Reply("Hello there", input_tokens=30, output_tokens=12), at=3))
        with pytest.raises(InvalidModelReply, match="malformed stream event") as raised:
            await anthropic_provider(server).complete(ask("claude-test"))
    assert not raised.value.retryable
    assert raised.value.usage == Usage(input=30, output=12)


async def test_anthropic_a_delta_for_a_block_never_started_carries_the_usage():
    reply = Reply("Hello there", input_tokens=30, output_tokens=12)
    events = [e for e in stream_events(reply) if e[0] != "content_block_start"]
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(RawEvents(events))
        with pytest.raises(InvalidModelReply, match="never started") as raised:
            await anthropic_provider(server).complete(ask("claude-test"))
    assert raised.value.usage == Usage(input=30, output=12)


async def test_anthropic_a_connection_that_breaks_mid_stream_carries_the_input_it_was_billed():
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(Dropped(Reply("Hello there", input_tokens=30, output_tokens=12), after=4))
        with pytest.raises(ProviderError, match="broke") as raised:
            await anthropic_provider(server).complete(ask("claude-test"))
    assert raised.value.retryable
    assert raised.value.usage == Usage(input=30, output=1)


def openai_provider(server: ChatServer) -> OpenAIProvider:
    return OpenAIProvider("gpt-test", base_url=server.base_url, api_key="sk-test", env={}, stream=True)


async def test_openai_a_malformed_chunk_carries_the_usage_chunk_that_follows_it():
    # the stream is read to its end after a bad chunk: its last chunk, the usage
    # (`stream_options.include_usage`), still arrives
    with ChatServer() as server:
        server.queue(GarbledChunks(TextReply("Hello there", prompt_tokens=25, completion_tokens=4), at=2))
        with pytest.raises(InvalidModelReply, match="malformed stream chunk") as raised:
            await openai_provider(server).complete(ask("gpt-test"))
    assert raised.value.usage == Usage(input=25, output=4)


async def test_openai_an_error_chunk_mid_stream_carries_none():
    # OpenAI reports usage only in the stream's last chunk: a stream that an error
    # ends has reported none, so nothing is counted (nothing can be)
    head = 'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}],"usage":null}'
    with ChatServer() as server:
        server.queue(RawStream([head, 'data: {"error": {"message": "overloaded", "type": "server_error"}}']))
        with pytest.raises(ProviderError, match="server error: overloaded") as raised:
            await openai_provider(server).complete(ask("gpt-test"))
    assert raised.value.usage is None
