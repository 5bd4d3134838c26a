"""Model requests as a run records them (`RecordedRequest`), and rebuilt from the log.

The live context records each request relative to the run's previous one
(`RequestRecorder`), so the bytes a run spends on them grow with what is new in
each request, not with the conversation's length. Replay walks a run's recorded
model turns in seq order and chains them back into whole requests
(`rebuild_request`), then compares the one it diverged at with the code's
(gormes/actors/runs/replay_diff.py).

Tools are recorded as (name, digest of the schema) only: their schemas are in the
code (or in `run.started.external_tools`), and a digest is enough to name the tool
whose schema changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import msgspec

from gormes.events.runs import (
    RecordedMessage,
    RecordedRequest,
    RecordedToolCall,
    RecordedToolDigest,
    RunLlmFailed,
    RunLlmTurn,
)
from gormes.providers.base import Message, ModelRequest, ToolSpec

_sorted = msgspec.json.Encoder(order="sorted")
DIGEST_LENGTH = 16  # hex digits: a diagnosis, not a proof (the request hash is that)


class WholeRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A model request in recorded terms: rebuilt from the log, or made from the
    code's `ModelRequest`, so the two compare field by field."""

    model: str
    messages: tuple[RecordedMessage, ...]
    tools: tuple[RecordedToolDigest, ...]
    temperature: float | None = None
    max_tokens: int | None = None


def recorded_message(message: Message) -> RecordedMessage:
    return RecordedMessage(
        role=message.role, content=message.content,
        tool_calls=tuple(RecordedToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in message.tool_calls),
        tool_call_id=message.tool_call_id, name=message.name,
    )


_digests: dict[int, tuple[ToolSpec, RecordedToolDigest]] = {}
_DIGESTS_MAX = 4096  # distinct ToolSpec objects (not runs, not tuples)


def tool_digest(tool: ToolSpec) -> RecordedToolDigest:
    """The tool's name and schema digest, computed once per ToolSpec object: every
    run with the same trust and allowlist offers the same ToolSpecs (each in a tuple
    of its own, see `live.tool_specs`), so ten thousand runs hash each schema once,
    not once per run. The entry keeps its ToolSpec alive, so its id stays its own."""
    hit = _digests.get(id(tool))
    if hit is not None and hit[0] is tool:
        return hit[1]
    digest = RecordedToolDigest(
        name=tool.name, digest=hashlib.sha256(_sorted.encode(tool)).hexdigest()[:DIGEST_LENGTH],
    )
    if len(_digests) >= _DIGESTS_MAX:
        _digests.clear()
    _digests[id(tool)] = (tool, digest)
    return digest


def tool_digests(tools: tuple[ToolSpec, ...]) -> tuple[RecordedToolDigest, ...]:
    """Each tool's name and schema digest (`tool_digest`)."""
    return tuple([tool_digest(t) for t in tools])


def whole_request(request: ModelRequest) -> WholeRequest:
    """The code's request in recorded terms."""
    return WholeRequest(
        model=request.model, messages=tuple(recorded_message(m) for m in request.messages),
        tools=tool_digests(request.tools), temperature=request.temperature, max_tokens=request.max_tokens,
    )


def _shared(before: tuple[Message, ...], now: tuple[Message, ...]) -> int:
    n = 0
    for a, b in zip(before, now):
        if a is not b and a != b:
            break
        n += 1
    return n


class RequestRecorder:
    """Makes each request's `RecordedRequest` relative to the one recorded before it
    (by this recorder: one per run context, in seq order)."""

    __slots__ = ("_messages", "_tools")

    def __init__(self) -> None:
        self._messages: tuple[Message, ...] | None = None
        self._tools: tuple[ToolSpec, ...] | None = None

    def record(self, request: ModelRequest) -> RecordedRequest:
        before, tools = self._messages, request.tools
        if before is None:
            shared, offered = 0, tool_digests(tools)
        else:
            shared = _shared(before, request.messages)
            same = tools is self._tools or tools == self._tools
            offered = None if same else tool_digests(tools)
        self._messages, self._tools = request.messages, tools
        return RecordedRequest(
            shared=shared, messages=tuple(recorded_message(m) for m in request.messages[shared:]),
            tools=offered, temperature=request.temperature, max_tokens=request.max_tokens,
        )


def rebuild_request(observations: Iterable[object], upto: int) -> WholeRequest | None:
    """The whole request of the model turn (or failed attempt) at index `upto` of a
    run's observations, chained from the recorded requests before it; None when the
    chain cannot be followed there (a turn recorded before requests were kept)."""
    messages: tuple[RecordedMessage, ...] | None = None
    tools: tuple[RecordedToolDigest, ...] | None = None
    for i, event in enumerate(observations):
        if i > upto:
            break
        if not isinstance(event, (RunLlmTurn, RunLlmFailed)):
            continue
        r = event.request
        if r is None or (r.shared and (messages is None or r.shared > len(messages))):
            messages = tools = None
        else:
            messages = (*(messages[: r.shared] if messages else ()), *r.messages)
            tools = r.tools if r.tools is not None else tools
        if i == upto:
            if messages is None or tools is None:
                return None
            return WholeRequest(model=event.model, messages=messages, tools=tools,
                                temperature=r.temperature if r is not None else None,
                                max_tokens=r.max_tokens if r is not None else None)
    return None
