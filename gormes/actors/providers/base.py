"""The neutral model interface: what a run asks a model and what it gets back.

Every provider speaks these types and nothing else, so no provider's wire format
reaches the log. A run records `request_hash(request)` with each model turn;
replay recomputes it from the code's request and compares.

    provider = open_provider("scripted:demo.json")
    reply = await provider.complete(ModelRequest(model=provider.model, messages=(...), tools=()))
    reply.message.content, reply.message.tool_calls, reply.usage
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

from gormes.errors import GormesError

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A model's request to call one tool; `arguments` is JSON text, as models send it."""

    id: str
    name: str
    arguments: str


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a conversation.

    `tool_calls` only on assistant messages; `tool_call_id` (and optionally the
    tool's `name`) only on tool messages, naming the call they answer.
    """

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool offered to the model; `parameters` is a JSON schema object."""

    name: str
    description: str
    parameters: dict[str, Any]


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens one model turn used, as the provider reported them.

    `input` counts every prompt token, the cached ones included; `cache_read` is
    the part of `input` served from the provider's prompt cache.
    """

    input: int
    output: int
    cache_read: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
        )


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything that decides a model's reply. Its hash identifies a turn in replay."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    temperature: float | None = None
    max_tokens: int | None = None


class ModelReply(msgspec.Struct, frozen=True, kw_only=True):
    """The model's answer: an assistant message with content and/or tool calls."""

    message: Message
    usage: Usage
    finish_reason: str
    model: str


def request_hash(request: ModelRequest) -> str:
    """sha256 (hex) of the request's canonical JSON: keys sorted, every field present."""
    canonical = msgspec.json.encode(request, order="sorted")
    return hashlib.sha256(canonical).hexdigest()


class ProviderError(GormesError):
    """The provider could not answer. `retryable` says whether trying again may help
    (rate limits, server errors, dropped connections) or not (a rejected request)."""

    exit_code = 1

    def __init__(self, message: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class InvalidModelReply(ProviderError):
    """The provider answered, but not with a valid reply: tool call arguments that are
    not JSON, no choices, a stream that breaks off or does not parse."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message, retryable=retryable)


def parse_tool_arguments(call: ToolCall, *, source: str = "model") -> dict[str, Any]:
    """A tool call's arguments as a JSON object, or `InvalidModelReply` saying why not."""
    try:
        value = msgspec.json.decode(call.arguments)
    except msgspec.DecodeError:
        raise InvalidModelReply(
            f"{source}: arguments of tool call {call.name!r} are not JSON: {call.arguments[:80]!r}"
        ) from None
    if not isinstance(value, dict):
        raise InvalidModelReply(
            f"{source}: arguments of tool call {call.name!r} are not a JSON object: {call.arguments[:80]!r}"
        )
    return value


@runtime_checkable
class Provider(Protocol):
    """A model behind the neutral interface.

    `name` is the spec it was opened with (`"openai:gpt-4o-mini"`); `model` is the
    model name to put in `ModelRequest.model`.
    """

    name: str
    model: str

    async def complete(self, request: ModelRequest) -> ModelReply: ...
