"""`anthropic:MODEL`: the Anthropic Messages API.

`POST {base_url}/v1/messages` through the official SDK (decision 0024), its
retries off; streamed by default (server-sent events) or as one JSON reply. This
module turns the neutral conversation into the Messages shape and the reply back:

- system messages become the top-level `system` text;
- an assistant's tool calls become `tool_use` blocks, and the tool messages that
  answer them `tool_result` blocks, consecutive ones merged into one user message
  (the API wants user and assistant turns to alternate);
- `stop_reason` becomes the neutral `finish_reason`: `end_turn` and
  `stop_sequence` -> `stop`, `tool_use` -> `tool_calls`, `max_tokens` ->
  `length`, `refusal` -> `content_filter`; any other passes through;
- usage: Anthropic's `input_tokens` leaves out the prompt tokens read from or
  written to its cache; the neutral `Usage.input` counts every prompt token, so
  it is `input_tokens + cache_creation_input_tokens + cache_read_input_tokens`,
  `cache_read` the second and `cache_write` the first of those.

The API requires `max_tokens`: the request's, else the provider's `max_tokens`
(argument, `GORMES_ANTHROPIC_MAX_TOKENS`, 4096).

Configuration, first found wins: the arguments, then `GORMES_ANTHROPIC_BASE_URL`
/ `GORMES_ANTHROPIC_API_KEY`, then `ANTHROPIC_BASE_URL` / `ANTHROPIC_API_KEY`;
the timeout as for every provider (`GORMES_MODEL_TIMEOUT`, 120 s).
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import msgspec
import anthropic

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
from gormes.providers.config import endpoint, model_timeout, positive_number
from gormes.providers.sdk_errors import translated
from gormes.providers.sse import EventReader
from gormes.providers.wire_names import ToolNames, tool_names

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}
_BAD_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
RETRYABLE_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


# -- the wire: what the server sends (unknown fields are ignored) ------------------


class _WireUsage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _WireBlock(msgspec.Struct):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None


class _WireMessage(msgspec.Struct):
    content: list[_WireBlock] | None = None
    model: str | None = None
    stop_reason: str | None = None
    usage: _WireUsage | None = None


class _WireDelta(msgspec.Struct):
    type: str | None = None
    text: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class _WireError(msgspec.Struct):
    type: str = ""
    message: str = ""


class _WireEvent(msgspec.Struct):
    """A streamed event; a whole reply has the shape of `message`."""

    type: str
    message: _WireMessage | None = None
    index: int | None = None
    content_block: _WireBlock | None = None
    delta: _WireDelta | None = None
    usage: _WireUsage | None = None
    error: _WireError | None = None


_decode_event = msgspec.json.Decoder(_WireEvent).decode
_decode_message = msgspec.json.Decoder(_WireMessage).decode


# -- the provider ------------------------------------------------------------------


class AnthropicProvider:
    """A Messages API client on `anthropic.AsyncAnthropic`."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        stream: bool = True,
        timeout: float | None = None,
        max_tokens: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self.model = model
        self.name = f"anthropic:{model}"
        self.base_url, self.api_key = endpoint(self.name, "ANTHROPIC", base_url, api_key, env, ANTHROPIC_BASE_URL)
        self.stream = stream
        self.timeout = model_timeout(self.name, timeout, env)
        source = "max_tokens" if max_tokens is not None else "GORMES_ANTHROPIC_MAX_TOKENS"
        tokens = positive_number(self.name, max_tokens if max_tokens is not None else env.get("GORMES_ANTHROPIC_MAX_TOKENS"), source, DEFAULT_MAX_TOKENS)
        if tokens != int(tokens):
            raise UserError(f"{self.name}: {source} must be a whole number, not {tokens}")
        self.max_tokens = int(tokens)
        self.url = f"{self.base_url}/v1/messages"
        # Built when opened (once per spec per process), not at the first turn: the
        # SDK's import takes a second or two, and a turn admitted by the shared
        # rate limits and back-off must leave at once, not that long after.
        self._client = anthropic.AsyncAnthropic(
            api_key=self.api_key or "unused", base_url=self.base_url, timeout=self.timeout, max_retries=0,
        )

    @property
    def default_max_tokens(self) -> int:
        """The `max_tokens` sent for a request that sets none (a budget's output
        ceiling is sent only when it is lower: output_ceiling.py)."""
        return self.max_tokens

    async def complete(self, request: ModelRequest) -> ModelReply:
        names = tool_names(self.name, request.tools)
        body = wire_request(request, names, stream=self.stream, max_tokens=self.max_tokens)
        headers: dict[str, Any] = {"Accept": "text/event-stream" if self.stream else "application/json"}
        if not self.api_key:
            headers["Authorization"] = anthropic.Omit()
        # The SDK no longer names `temperature` (newer models refuse it); a request
        # that sets one still sends it, and a model that refuses it answers 400.
        extra = {"temperature": body.pop("temperature")} if "temperature" in body else None
        client = self._client
        assembly = _StreamAssembly(self.name, request, names) if self.stream else None
        # a failure while the stream is read carries what it had reported by then:
        # message_start's input and message_delta's output
        with billed_as_read(assembly.reported if assembly is not None else None):
            with translated(self.name, self.url, self.timeout, anthropic):
                create = client.messages.with_streaming_response.create
                async with create(**body, extra_headers=headers, extra_body=extra) as response:
                    if assembly is not None:
                        return await _read_stream(assembly, response.iter_lines())
                    return _read_whole(self.name, request, names, await response.read())


# -- the request -------------------------------------------------------------------


def wire_request(request: ModelRequest, names: ToolNames, *, stream: bool, max_tokens: int) -> dict[str, Any]:
    """The Messages API body for a neutral request."""
    system = [m.content for m in request.messages if m.role == "system"]
    turns: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message, names)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        # In a user turn the tool results come first, before any text.
        turn["content"].sort(key=lambda b: b["type"] != "tool_result")
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens if request.max_tokens is not None else max_tokens,
        "messages": turns,
        "stream": stream,
    }
    if system:
        body["system"] = "\n\n".join(system)
    if request.tools:
        body["tools"] = [
            {"name": names.wire(t.name), "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    if request.temperature is not None:
        body["temperature"] = request.temperature
    return body


def _wire_id(call_id: str) -> str:
    # Tool use ids must match ^[a-zA-Z0-9_-]+$; one another provider or a script
    # made may not, and the same id must map the same way in tool_use and tool_result.
    return _BAD_ID_CHARS.sub("_", call_id) or "_"


def _blocks(message: Message, names: ToolNames) -> list[dict[str, Any]]:
    if message.role == "tool":
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": _wire_id(message.tool_call_id or "")}
        if message.content:
            result["content"] = message.content
        return [result]
    # The API refuses an empty text block; an assistant turn of tool calls alone has none.
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    for call in message.tool_calls:
        blocks.append({
            "type": "tool_use", "id": _wire_id(call.id), "name": names.wire(call.name),
            "input": parse_tool_arguments(call, source="the conversation"),
        })
    return blocks


# -- the reply ---------------------------------------------------------------------


def _usage(wire: _WireUsage | None) -> Usage:
    if wire is None:
        return Usage(input=0, output=0)
    written = wire.cache_creation_input_tokens or 0
    read = wire.cache_read_input_tokens or 0
    return Usage(
        input=(wire.input_tokens or 0) + written + read,
        output=wire.output_tokens or 0,
        cache_read=read,
        cache_write=written,
    )


def _finish(stop_reason: str | None, calls: tuple[ToolCall, ...]) -> str:
    if stop_reason is None:
        return "tool_calls" if calls else "stop"
    return FINISH_REASONS.get(stop_reason, stop_reason)


def _tool_call(name: str, names: ToolNames, block_id: str | None, wire_name: str | None, arguments: str) -> ToolCall:
    if not wire_name:
        raise InvalidModelReply(f"{name}: a tool_use block has no name")
    call = ToolCall(id=block_id or "", name=names.neutral(wire_name), arguments=arguments or "{}")
    parse_tool_arguments(call, source=name)
    return call


def _read_whole(name: str, request: ModelRequest, names: ToolNames, data: bytes) -> ModelReply:
    try:
        message = _decode_message(data)
    except msgspec.MsgspecError as exc:
        raise InvalidModelReply(f"{name}: malformed reply: {' '.join(str(exc).split())}") from None
    usage = _usage(message.usage)
    text: list[str] = []
    calls: list[ToolCall] = []
    with billed(usage if message.usage is not None else None):
        if message.content is None:
            raise InvalidModelReply(f"{name}: the reply has no content")
        for block in message.content:
            if block.type == "text":
                text.append(block.text or "")
            elif block.type == "tool_use":
                arguments = msgspec.json.encode(block.input if block.input is not None else {}).decode()
                calls.append(_tool_call(name, names, block.id, block.name, arguments))
    return ModelReply(
        message=Message(role="assistant", content="".join(text), tool_calls=tuple(calls)),
        usage=usage,
        finish_reason=_finish(message.stop_reason, tuple(calls)),
        model=message.model or request.model,
    )


class _StreamAssembly:
    """A streamed reply put together event by event, in the API's order:
    message_start, content_block_start/delta/stop per block, message_delta (the
    stop reason and the output tokens), message_stop; `ping` anywhere."""

    def __init__(self, name: str, request: ModelRequest, names: ToolNames) -> None:
        self.name = name
        self.request = request
        self.names = names
        self._events = EventReader()
        self._blocks: dict[int, _WireBlock] = {}
        self._parts: dict[int, list[str]] = {}
        self._usage = _WireUsage()
        self._model: str | None = None
        self._stop_reason: str | None = None
        self._started = False
        self.done = False

    def feed(self, line: str) -> None:
        event = self._events.feed(line)
        if event is not None and not self.done:
            self._dispatch(event.data)

    def _dispatch(self, data: str) -> None:
        try:
            event = _decode_event(data)
        except msgspec.MsgspecError as exc:
            raise InvalidModelReply(f"{self.name}: malformed stream event: {' '.join(str(exc).split())}") from None
        kind = event.type
        if kind == "error":
            error = event.error or _WireError()
            raise ProviderError(
                f"{self.name}: server error: {error.type or 'error'}: {error.message or 'no message'}",
                retryable=error.type in RETRYABLE_ERRORS,
            )
        if kind == "message_start":
            self._started = True
            message = event.message or _WireMessage()
            self._model = message.model
            self._merge_usage(message.usage)
        elif kind == "content_block_start" and event.index is not None and event.content_block is not None:
            self._blocks[event.index] = event.content_block
            self._parts[event.index] = [event.content_block.text or ""]
        elif kind == "content_block_delta" and event.delta is not None:
            if event.index not in self._parts:
                raise InvalidModelReply(f"{self.name}: a delta for block {event.index}, which never started")
            piece = event.delta.text if event.delta.type == "text_delta" else event.delta.partial_json
            self._parts[event.index].append(piece or "")
        elif kind == "message_delta":
            if event.delta is not None and event.delta.stop_reason:
                self._stop_reason = event.delta.stop_reason
            self._merge_usage(event.usage)
        elif kind == "message_stop":
            self.done = True

    def salvage(self, line: str) -> None:
        """After a failure: the usage the events that follow report, nothing else
        (the rest of the stream is read to its end all the same, and the API bills
        the whole reply it sent). A blank line ends the last event."""
        event = self._events.feed(line)
        if event is None:
            return
        try:
            wire = _decode_event(event.data)
        except msgspec.MsgspecError:
            return
        if wire.type == "message_start" and wire.message is not None:
            self._merge_usage(wire.message.usage)
        elif wire.type == "message_delta":
            self._merge_usage(wire.usage)

    def reported(self) -> Usage:
        """The usage the stream has reported so far (zero before message_start)."""
        return _usage(self._usage)

    def _merge_usage(self, usage: _WireUsage | None) -> None:
        # message_delta repeats the counts so far; a field it leaves out keeps its value.
        if usage is None:
            return
        for field in _WireUsage.__struct_fields__:
            value = getattr(usage, field)
            if value is not None:
                setattr(self._usage, field, value)

    def _tool_calls(self) -> list[ToolCall]:
        calls: list[ToolCall] = []
        for index in sorted(self._blocks):
            block, parts = self._blocks[index], self._parts[index]
            if block.type == "tool_use":
                arguments = "".join(parts[1:]) or msgspec.json.encode(block.input or {}).decode()
                calls.append(_tool_call(self.name, self.names, block.id, block.name, arguments))
        return calls

    def finish(self) -> ModelReply:
        event = self._events.flush()
        if event is not None and not self.done:
            self._dispatch(event.data)
        if not self._started:
            raise InvalidModelReply(f"{self.name}: the stream carried no message")
        # message_start gave the input's count, message_delta the output's so far:
        # a stream that broke off, or a tool call cut at max_tokens, was billed that
        with billed(_usage(self._usage)):
            if not self.done:
                raise InvalidModelReply(f"{self.name}: the stream ended before the reply finished", retryable=True)
            calls = self._tool_calls()
        text = ["".join(self._parts[i]) for i in sorted(self._blocks) if self._blocks[i].type == "text"]
        return ModelReply(
            message=Message(role="assistant", content="".join(text), tool_calls=tuple(calls)),
            usage=_usage(self._usage),
            finish_reason=_finish(self._stop_reason, tuple(calls)),
            model=self._model or self.request.model,
        )


async def _read_stream(assembly: _StreamAssembly, lines: AsyncIterator[str]) -> ModelReply:
    failure: ProviderError | None = None
    # Read to the end even after a bad event, as the openai provider does, and for
    # the usage its later events report (a bad content event is followed by the
    # message_delta with the output the API billed).
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
