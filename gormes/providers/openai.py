"""`openai:MODEL`: any OpenAI-compatible chat-completions server.

`POST {base_url}/chat/completions` through the official SDK (decision 0024),
streamed (server-sent events) by default or as one JSON reply. The SDK carries
the request and its errors; this module decodes the reply itself (msgspec, so a
malformed reply is an `InvalidModelReply` saying what is wrong) and maps tool
names to the wire and back (`wire_names`). The wire shapes live in this module
only: callers give and get the neutral types of `base`.

Configuration, first found wins: the `base_url` / `api_key` / `timeout`
arguments, then `GORMES_OPENAI_BASE_URL` / `GORMES_OPENAI_API_KEY` /
`GORMES_MODEL_TIMEOUT`, then `OPENAI_BASE_URL` / `OPENAI_API_KEY`; the base URL
defaults to OpenAI's own API, the timeout to 120 s.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec
import openai

from gormes.errors import UserError
from gormes.providers.base import (
    InvalidModelReply,
    Message,
    ModelReply,
    ModelRequest,
    ProviderError,
    ToolCall,
    Usage,
    billed,
    billed_as_read,
    parse_tool_arguments,
)
from gormes.providers.config import endpoint, model_timeout
from gormes.providers.sdk_errors import translated
from gormes.providers.sse import Event, EventReader
from gormes.providers.wire_names import ToolNames, tool_names

OPENAI_BASE_URL = "https://api.openai.com/v1"
OPENAI_HOST = "api.openai.com"


OUTPUT_FIELD_ENV = "GORMES_OPENAI_MAX_TOKENS_FIELD"
OUTPUT_FIELDS = ("max_completion_tokens", "max_tokens")
# OpenAI's reasoning models (the o-series, gpt-5) refuse `max_tokens`, whoever relays
# the request to them (a company's proxy in front of OpenAI, say). A router's name for
# one (`openai/o3-mini`) is not matched: the router reads `max_tokens` (decision 0077)
REASONING_MODEL = re.compile(r"^(o\d|gpt-5)")


def output_bound_field(base_url: str, model: str = "", env: Mapping[str, str] | None = None) -> str:
    """The field a request's `max_tokens` goes out as: the one `GORMES_OPENAI_MAX_TOKENS_FIELD`
    names, if set (for a server these rules guess wrong). Else, to OpenAI's own API
    or for one of its reasoning models at any address: `max_completion_tokens`, its
    documented one (`max_tokens` is deprecated there, and its reasoning models refuse
    it), which bounds reasoning and visible output together, as budgets count output.
    Any other: `max_tokens`, the field every compatible server reads (Ollama's, for
    one, reads no other)."""
    chosen = (env or {}).get(OUTPUT_FIELD_ENV, "").strip()
    if chosen:
        if chosen not in OUTPUT_FIELDS:
            raise UserError(f"{OUTPUT_FIELD_ENV} must be one of {', '.join(OUTPUT_FIELDS)}, not {chosen!r}")
        return chosen
    if urlsplit(base_url).hostname == OPENAI_HOST or REASONING_MODEL.match(model):
        return "max_completion_tokens"
    return "max_tokens"


# -- the wire: what the server sends (unknown fields are ignored) ------------------


class _WireFunction(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _WireToolCall(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _WireFunction | None = None


class _WireMessage(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_WireToolCall] | None = None


class _WireChoice(msgspec.Struct):
    index: int = 0
    message: _WireMessage | None = None  # a whole reply
    delta: _WireMessage | None = None  # a streamed chunk
    finish_reason: str | None = None


class _WirePromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _WireCompletionDetails(msgspec.Struct):
    reasoning_tokens: int | None = None


class _WireUsage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _WirePromptDetails | None = None
    completion_tokens_details: _WireCompletionDetails | None = None


class _WireError(msgspec.Struct):
    message: str = ""


class _WireCompletion(msgspec.Struct):
    """A whole reply and a streamed chunk have the same outer shape."""

    choices: list[_WireChoice] | None = None
    usage: _WireUsage | None = None
    model: str | None = None
    error: _WireError | None = None


_decode_completion = msgspec.json.Decoder(_WireCompletion).decode


# -- the provider ------------------------------------------------------------------


class OpenAIProvider:
    """A chat-completions client on the official SDK (`openai.AsyncOpenAI`, its
    retries off: RunContext.llm retries and records each attempt)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        stream: bool = True,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self.model = model
        self.name = f"openai:{model}"
        self.base_url, self.api_key = endpoint(self.name, "OPENAI", base_url, api_key, env, OPENAI_BASE_URL)
        self.stream = stream
        self.timeout = model_timeout(self.name, timeout, env)
        self.url = f"{self.base_url}/chat/completions"
        self.output_field = output_bound_field(self.base_url, model, env)
        # Built when opened (once per spec per process), not at the first turn: the
        # SDK's import takes a second or two, and a turn admitted by the shared
        # rate limits and back-off must leave at once, not that long after. A server
        # that needs no key still gets one for the SDK, which refuses none;
        # `complete` then leaves the Authorization header out.
        self._client = openai.AsyncOpenAI(
            api_key=self.api_key or "unused", base_url=self.base_url, timeout=self.timeout, max_retries=0,
        )

    async def complete(self, request: ModelRequest) -> ModelReply:
        names = tool_names(self.name, request.tools)
        body = _wire_request(request, names, stream=self.stream, output_field=self.output_field)
        headers: dict[str, Any] = {"Accept": "text/event-stream" if self.stream else "application/json"}
        if not self.api_key:
            headers["Authorization"] = openai.Omit()
        client = self._client
        assembly = _StreamAssembly(self.name, request, names) if self.stream else None
        # a failure while the stream is read carries the usage chunk if that had
        # come, which it seldom has (it is the last chunk before [DONE])
        with billed_as_read(assembly.reported if assembly is not None else None):
            with translated(self.name, self.url, self.timeout, openai):
                async with client.chat.completions.with_streaming_response.create(**body, extra_headers=headers) as response:
                    if assembly is not None:
                        return await _read_stream(assembly, response.iter_lines())
                    return _read_whole(self.name, request, names, await response.read())


def _wire_request(request: ModelRequest, names: ToolNames, *, stream: bool,
                  output_field: str = "max_tokens") -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [_wire_message(m, names) for m in request.messages],
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        body["tools"] = [
            {"type": "function", "function": {"name": names.wire(t.name), "description": t.description, "parameters": t.parameters}}
            for t in request.tools
        ]
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body[output_field] = request.max_tokens
    return body


def _wire_message(message: Message, names: ToolNames) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        # An assistant turn that only calls tools has null content on the wire.
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": names.wire(c.name), "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        # A tool message names its tool, which the wire must carry like any tool name.
        wire["name"] = names.wire(message.name) if message.role == "tool" else message.name
    return wire


def _decode(name: str, data: bytes | str, what: str) -> _WireCompletion:
    try:
        completion = _decode_completion(data)
    except msgspec.MsgspecError as exc:
        raise InvalidModelReply(f"{name}: malformed {what}: {' '.join(str(exc).split())}") from None
    if completion.error is not None:
        raise ProviderError(f"{name}: server error: {completion.error.message}", retryable=True)
    return completion


def _usage(wire: _WireUsage | None) -> Usage:
    # A server that reports no usage is counted as zero tokens: there is nothing to read.
    if wire is None:
        return Usage(input=0, output=0)
    cached = wire.prompt_tokens_details.cached_tokens if wire.prompt_tokens_details else None
    # Reasoning models report their hidden reasoning tokens apart; they are part of
    # `completion_tokens` (and billed as output).
    reasoning = wire.completion_tokens_details.reasoning_tokens if wire.completion_tokens_details else None
    return Usage(input=wire.prompt_tokens or 0, output=wire.completion_tokens or 0, cache_read=cached or 0,
                 reasoning=reasoning or 0)


def _read_whole(name: str, request: ModelRequest, names: ToolNames, data: bytes) -> ModelReply:
    completion = _decode(name, data, "reply")
    usage = _usage(completion.usage)
    with billed(usage if completion.usage is not None else None):
        if not completion.choices:
            raise InvalidModelReply(f"{name}: the reply has no choices")
        choice = completion.choices[0]
        wire = choice.message or _WireMessage()
        calls = _ToolCallAssembly()
        for call in wire.tool_calls or ():
            calls.add(call)
        return _reply(request, completion.model, wire.content or "", calls.finish(name, names), choice.finish_reason, usage)


class _StreamAssembly:
    """A streamed reply put together event by event (see `sse`)."""

    def __init__(self, name: str, request: ModelRequest, names: ToolNames) -> None:
        self.name = name
        self.request = request
        self.names = names
        self.done = False
        self._events = EventReader()
        self._content: list[str] = []
        self._calls = _ToolCallAssembly()
        self._finish_reason: str | None = None
        self._usage: _WireUsage | None = None
        self._model: str | None = None
        self._saw_choice = False

    def feed(self, line: str) -> None:
        if not self.done:
            self._dispatch(self._events.feed(line))

    def _dispatch(self, event: Event | None) -> None:
        if event is None:
            return
        if event.data.strip() == "[DONE]":
            self.done = True
            return
        chunk = _decode(self.name, event.data, "stream chunk")
        self._model = chunk.model or self._model
        self._usage = chunk.usage or self._usage
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            self._saw_choice = True
            delta = choice.delta or choice.message or _WireMessage()
            if delta.content:
                self._content.append(delta.content)
            for call in delta.tool_calls or ():
                self._calls.add(call)
            self._finish_reason = choice.finish_reason or self._finish_reason

    def salvage(self, line: str) -> None:
        """After a failure: the usage chunk, if it still comes (the rest of the stream
        is read to its end all the same), nothing else. A blank line ends the last event."""
        event = self._events.feed(line)
        if event is None or self.done:
            return
        if event.data.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = _decode_completion(event.data)
        except msgspec.MsgspecError:
            return
        self._usage = chunk.usage or self._usage

    def reported(self) -> Usage | None:
        """The usage the stream has reported so far: None until its usage chunk."""
        return None if self._usage is None else _usage(self._usage)

    def finish(self) -> ModelReply:
        if not self.done:
            self._dispatch(self._events.flush())
        # the usage chunk comes last (`stream_options.include_usage`): a stream cut short has none
        with billed(_usage(self._usage) if self._usage is not None else None):
            if not self._saw_choice:
                raise InvalidModelReply(f"{self.name}: the stream carried no choices")
            if self._finish_reason is None:
                raise InvalidModelReply(f"{self.name}: the stream ended before the reply finished", retryable=True)
            return _reply(
                self.request,
                self._model,
                "".join(self._content),
                self._calls.finish(self.name, self.names),
                self._finish_reason,
                _usage(self._usage),
            )


async def _read_stream(assembly: _StreamAssembly, lines: AsyncIterator[str]) -> ModelReply:
    failure: ProviderError | None = None
    # The stream is read to its end even after [DONE] or a bad chunk: httpx's nested
    # line iterators cannot be closed early without leaking unfinished generators.
    # After a bad chunk, the usage chunk may still come: the failure carries it.
    async for line in lines:
        if failure is None:
            try:
                assembly.feed(line)
            except ProviderError as exc:
                failure = exc
        else:
            assembly.salvage(line)
    if failure is not None:
        assembly.salvage("")  # the last event, if no blank line ended it
        raise failure  # `complete` bills it with what the stream reported
    return assembly.finish()


class _ToolCallAssembly:
    """Tool calls put together from deltas keyed by index; arguments arrive in fragments."""

    def __init__(self) -> None:
        self._ids: dict[int, str] = {}
        self._names: dict[int, str] = {}
        self._arguments: dict[int, list[str]] = {}

    def add(self, delta: _WireToolCall) -> None:
        index = delta.index
        self._arguments.setdefault(index, [])
        if delta.id:
            self._ids.setdefault(index, delta.id)
        function = delta.function or _WireFunction()
        if function.name:
            self._names.setdefault(index, function.name)
        if function.arguments:
            self._arguments[index].append(function.arguments)

    def finish(self, name: str, names: ToolNames) -> tuple[ToolCall, ...]:
        calls = []
        for index in sorted(self._arguments):
            if index not in self._names:
                raise InvalidModelReply(f"{name}: tool call #{index} has no function name")
            arguments = "".join(self._arguments[index]) or "{}"
            call = ToolCall(id=self._ids.get(index, f"call_{index}"), name=names.neutral(self._names[index]), arguments=arguments)
            parse_tool_arguments(call, source=name)
            calls.append(call)
        return tuple(calls)


def _reply(
    request: ModelRequest,
    model: str | None,
    content: str,
    calls: tuple[ToolCall, ...],
    finish_reason: str | None,
    usage: Usage,
) -> ModelReply:
    return ModelReply(
        message=Message(role="assistant", content=content, tool_calls=calls),
        usage=usage,
        finish_reason=finish_reason or ("tool_calls" if calls else "stop"),
        model=model or request.model,
    )
