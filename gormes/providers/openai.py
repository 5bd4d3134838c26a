"""`openai:MODEL`: any OpenAI-compatible chat-completions server over HTTP.

`POST {base_url}/chat/completions`, streamed (server-sent events) by default or as
one JSON reply. The wire shapes live in this module only: callers give and get
the neutral types of `base`.

Configuration, first found wins: the `base_url` / `api_key` arguments, then
`GORMES_OPENAI_BASE_URL` / `GORMES_OPENAI_API_KEY`, then `OPENAI_BASE_URL` /
`OPENAI_API_KEY`; the base URL defaults to OpenAI's own API.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import msgspec

from gormes.providers.base import (
    InvalidModelReply,
    Message,
    ModelReply,
    ModelRequest,
    ProviderError,
    ToolCall,
    Usage,
    parse_tool_arguments,
)
from gormes.errors import UserError

OPENAI_BASE_URL = "https://api.openai.com/v1"
RETRYABLE_STATUSES = frozenset({408, 409, 429})


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


class _WireUsage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _WirePromptDetails | None = None


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
    """A chat-completions client. Each call opens and closes its own connection."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        stream: bool = True,
        timeout: float = 120.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = (
            base_url
            or env.get("GORMES_OPENAI_BASE_URL")
            or env.get("OPENAI_BASE_URL")
            or OPENAI_BASE_URL
        ).rstrip("/")
        self.api_key = api_key or env.get("GORMES_OPENAI_API_KEY") or env.get("OPENAI_API_KEY")
        if not self.api_key and self.base_url == OPENAI_BASE_URL:
            raise UserError(
                f"{self.name}: no API key: set GORMES_OPENAI_API_KEY or OPENAI_API_KEY "
                "(or a base URL for a local server that needs none)"
            )
        self.stream = stream
        self.timeout = timeout
        self._ssl: ssl.SSLContext | None = None

    async def complete(self, request: ModelRequest) -> ModelReply:
        body = _wire_request(request, stream=self.stream)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream" if self.stream else "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = f"{self.base_url}/chat/completions"
        try:
            async with (
                httpx.AsyncClient(timeout=self.timeout, verify=self._ssl_context()) as client,
                client.stream("POST", url, content=msgspec.json.encode(body), headers=headers) as response,
            ):
                if response.status_code >= 400:
                    await response.aread()
                    raise _http_error(self.name, response)
                if self.stream:
                    return await _read_stream(self.name, request, response.aiter_lines())
                return _read_whole(self.name, request, await response.aread())
        except httpx.TransportError as exc:
            raise ProviderError(f"{self.name}: cannot reach {url}: {exc or type(exc).__name__}", retryable=True) from None

    def _ssl_context(self) -> ssl.SSLContext:
        # Built once: loading the CA bundle costs milliseconds on every call otherwise.
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()
        return self._ssl


def _wire_request(request: ModelRequest, *, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [_wire_message(m) for m in request.messages],
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        body["tools"] = [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in request.tools
        ]
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    return body


def _wire_message(message: Message) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        # An assistant turn that only calls tools has null content on the wire.
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        wire["name"] = message.name
    return wire


def _http_error(name: str, response: httpx.Response) -> ProviderError:
    status = response.status_code
    detail = response.text.strip()
    try:
        error = msgspec.json.decode(response.content, type=_WireCompletion).error
    except msgspec.MsgspecError:
        error = None
    if error is not None and error.message:
        detail = error.message
    detail = " ".join(detail.split())[:300] or response.reason_phrase
    retryable = status in RETRYABLE_STATUSES or status >= 500
    return ProviderError(f"{name}: HTTP {status}: {detail}", retryable=retryable, status=status)


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
    return Usage(input=wire.prompt_tokens or 0, output=wire.completion_tokens or 0, cache_read=cached or 0)


def _read_whole(name: str, request: ModelRequest, data: bytes) -> ModelReply:
    completion = _decode(name, data, "reply")
    if not completion.choices:
        raise InvalidModelReply(f"{name}: the reply has no choices")
    choice = completion.choices[0]
    wire = choice.message or _WireMessage()
    calls = _ToolCallAssembly()
    for call in wire.tool_calls or ():
        calls.add(call)
    return _reply(name, request, completion.model, wire.content or "", calls.finish(name), choice.finish_reason, _usage(completion.usage))


class _StreamAssembly:
    """A streamed reply put together line by line from server-sent events.

    Several `data:` lines of one event join with newlines; a blank line ends an event.
    Comments (":") and `event:`/`id:`/`retry:` fields carry nothing we use.
    """

    def __init__(self, name: str, request: ModelRequest) -> None:
        self.name = name
        self.request = request
        self.done = False
        self._data: list[str] = []
        self._content: list[str] = []
        self._calls = _ToolCallAssembly()
        self._finish_reason: str | None = None
        self._usage: _WireUsage | None = None
        self._model: str | None = None
        self._saw_choice = False

    def feed(self, line: str) -> None:
        if self.done:
            return
        if not line:
            self._dispatch()
        elif line.startswith("data:"):
            value = line[5:]
            self._data.append(value.removeprefix(" "))

    def _dispatch(self) -> None:
        if not self._data:
            return
        data, self._data = "\n".join(self._data), []
        if data.strip() == "[DONE]":
            self.done = True
            return
        chunk = _decode(self.name, data, "stream chunk")
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

    def finish(self) -> ModelReply:
        self._dispatch()
        if not self._saw_choice:
            raise InvalidModelReply(f"{self.name}: the stream carried no choices")
        if self._finish_reason is None:
            raise InvalidModelReply(f"{self.name}: the stream ended before the reply finished", retryable=True)
        return _reply(
            self.name,
            self.request,
            self._model,
            "".join(self._content),
            self._calls.finish(self.name),
            self._finish_reason,
            _usage(self._usage),
        )


async def _read_stream(name: str, request: ModelRequest, lines: AsyncIterator[str]) -> ModelReply:
    assembly = _StreamAssembly(name, request)
    failure: ProviderError | None = None
    # The stream is read to its end even after [DONE] or a bad chunk: httpx's nested
    # line iterators cannot be closed early without leaking unfinished generators.
    async for line in lines:
        if failure is None:
            try:
                assembly.feed(line)
            except ProviderError as exc:
                failure = exc
    if failure is not None:
        raise failure
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

    def finish(self, name: str) -> tuple[ToolCall, ...]:
        calls = []
        for index in sorted(self._arguments):
            if index not in self._names:
                raise InvalidModelReply(f"{name}: tool call #{index} has no function name")
            arguments = "".join(self._arguments[index]) or "{}"
            call = ToolCall(id=self._ids.get(index, f"call_{index}"), name=self._names[index], arguments=arguments)
            parse_tool_arguments(call, source=name)
            calls.append(call)
        return tuple(calls)


def _reply(
    name: str,
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
