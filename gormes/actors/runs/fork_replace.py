"""What a fork may change: the one observation at its position (decision 0034), and
what its live part may do that cannot be undone.

    replacement = reply_replacement(parse_reply(Path("reply.json").read_text()))
    event, replaced = replace_observation(record, replacement)   # ForkRefused on a kind mismatch
    risks = non_idempotent_operations(registry, started.trust, started.tools)

A replacement stands in for one recorded observation of the source run, of the
same kind: a model reply (`run.llm_turn`, or a failed model turn `run.llm_failed`:
"what if the model had answered?") is replaced by a reply; a tool call
(`run.tool_called`) by a result or an error. Anything else is refused. The
replaced event keeps the original's `seq`, request hash and call (operation,
arguments), so the fork's code is served it where it asked the original; its
usage is zero (no model produced it) and a replaced tool call's error type is
`ReplacedByFork`. `ObservationReplaced` (in the fork's `forked_from`) names the
original by the sha256 of its canonical JSON and carries the replacement.

A reply file is JSON in the recorded reply's shape when its first non-blank
character is `{` (`content`, `tool_calls` of `{name, arguments, id?}` with
`arguments` a JSON object or its text, `finish_reason`, `model`), else plain text:
a reply with that text and no tool calls.

All of it is pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import msgspec

from gormes.errors import UserError
from gormes.events.base import Recorded
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    ObservationReplaced,
    RecordedReply,
    RecordedToolCall,
    RunLlmFailed,
    RunLlmTurn,
    RunToolCalled,
)

REPLACED_ERROR_TYPE = "ReplacedByFork"
_canonical = msgspec.json.Encoder(order="sorted")


class ForkRefused(UserError):
    """The fork cannot be made as asked; nothing was written."""


class GivenToolCall(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A tool call of a given reply: `arguments` a JSON object, or the JSON text a model sends."""

    name: str
    arguments: dict[str, Any] | str = msgspec.field(default_factory=dict)
    id: str | None = None


class GivenReply(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A model reply given to a fork, in the recorded reply's shape (`RecordedReply`)."""

    content: str = ""
    tool_calls: list[GivenToolCall] = msgspec.field(default_factory=list)
    finish_reason: str | None = None  # None: "tool_calls" when it has any, else "stop"
    model: str = ""


class Replacement(msgspec.Struct, frozen=True, kw_only=True):
    """What stands in for the observation at the fork's position."""

    kind: Literal["reply", "tool_result", "tool_error"]
    reply: RecordedReply | None = None
    result: Any = None
    error: str = ""

    @property
    def value(self) -> Any:
        if self.kind == "reply":
            return msgspec.to_builtins(self.reply)
        return self.result if self.kind == "tool_result" else self.error


def parse_reply(text: str) -> GivenReply | str:
    """A reply file's text: JSON in the recorded reply's shape when it starts with
    `{`, else plain text. Bad JSON, or JSON of another shape, is a ForkRefused."""
    if not text.lstrip().startswith("{"):
        return text
    try:
        return msgspec.json.decode(text.encode(), type=GivenReply)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ForkRefused(f"the reply is not a reply in the recorded shape ({exc}): give "
                          '{"content": ..., "tool_calls": [{"name": ..., "arguments": {...}}]} or plain text') from None


def reply_replacement(given: GivenReply | str) -> Replacement:
    if isinstance(given, str):
        return Replacement(kind="reply", reply=RecordedReply(content=given, finish_reason="stop"))
    calls = []
    for i, call in enumerate(given.tool_calls, 1):
        if isinstance(call.arguments, str):
            try:
                msgspec.json.decode(call.arguments)
            except msgspec.DecodeError:
                raise ForkRefused(f"the reply's tool call {i} ({call.name}): arguments are not JSON text") from None
            arguments = call.arguments
        else:
            arguments = msgspec.json.encode(call.arguments).decode()
        calls.append(RecordedToolCall(id=call.id or f"fork_call_{i}", name=call.name, arguments=arguments))
    finish = given.finish_reason or ("tool_calls" if calls else "stop")
    return Replacement(kind="reply", reply=RecordedReply(
        content=given.content, tool_calls=tuple(calls), finish_reason=finish, model=given.model))


def tool_result_replacement(json_text: str) -> Replacement:
    try:
        return Replacement(kind="tool_result", result=msgspec.json.decode(json_text.encode()))
    except msgspec.DecodeError as exc:
        raise ForkRefused(f"--tool-result is not JSON ({exc})") from None


def tool_error_replacement(text: str) -> Replacement:
    if not text.strip():
        raise ForkRefused("--tool-error wants the error's text")
    return Replacement(kind="tool_error", error=text)


def observation_hash(event: Any) -> str:
    """sha256 hex of an observation's canonical JSON (its type tag included)."""
    return hashlib.sha256(_canonical.encode(event)).hexdigest()


_KIND = {"run.llm_turn": "a model reply", "run.llm_failed": "a failed model turn",
         "run.tool_called": "a tool call"}
_GIVE = {"reply": "--reply FILE", "tool_result": "--tool-result JSON", "tool_error": "--tool-error TEXT"}


def replace_observation(record: Recorded, replacement: Replacement) -> tuple[Any, ObservationReplaced]:
    """The event that stands in for `record` (an observation of the source run) in
    the fork, and what the fork's start says it replaced. ForkRefused when the
    replacement is not of the observation's kind."""
    event = record.event
    if replacement.kind == "reply":
        if isinstance(event, RunLlmTurn):
            # given, not a provider's: no usage, and no max_tokens was sent for it
            new: Any = msgspec.structs.replace(event, reply=replacement.reply, usage=Tokens(), cache_write=0,
                                               duration_ms=0, sent_max_tokens=None)
        elif isinstance(event, RunLlmFailed):
            new = RunLlmTurn(seq=event.seq, request_hash=event.request_hash, model=event.model, message_count=0,
                             reply=replacement.reply, usage=Tokens(), request=event.request)
        else:
            raise _mismatch(record, replacement)
    elif isinstance(event, RunToolCalled):
        if replacement.kind == "tool_result":
            new = msgspec.structs.replace(event, outcome="ok", result=replacement.result, error=None,
                                          error_type=None, duration_ms=0)
        else:
            new = msgspec.structs.replace(event, outcome="error", result=None, error=replacement.error,
                                          error_type=REPLACED_ERROR_TYPE, duration_ms=0)
    else:
        raise _mismatch(record, replacement)
    return new, ObservationReplaced(
        seq=event.seq, type=record.type, original_hash=observation_hash(event),  # type: ignore[union-attr]
        kind=replacement.kind, value=replacement.value,
    )


def _mismatch(record: Recorded, replacement: Replacement) -> ForkRefused:
    what = _KIND.get(record.type, f"not a model reply or a tool call ({record.type})")
    fits = {"run.llm_turn": "--reply FILE", "run.llm_failed": "--reply FILE",
            "run.tool_called": "--tool-result JSON or --tool-error TEXT"}.get(record.type)
    hint = f": give {fits}" if fits else ": only a model reply or a tool call can be replaced"
    return ForkRefused(f"position {record.position} is {what}, which {_GIVE[replacement.kind]} cannot replace{hint}")


class LiveRisk(msgspec.Struct, frozen=True, kw_only=True):
    """An operation a fork's live part may call that changes something and is not
    idempotent: calling it again does it again."""

    name: str
    description: str


def non_idempotent_operations(registry: Any, trust: str, tools: tuple[str, ...] | None) -> list[LiveRisk]:
    """The mutating, non-idempotent operations a run with `trust` and allowlist
    `tools` may call (those the registry offers it as tools), by name. Subagents it
    spawns may use at most these."""
    if registry is None:
        return []
    names = {s.name for s in registry.tool_schemas(trust, tools)}
    return [LiveRisk(name=spec.name, description=spec.description) for spec in registry.list(trust=trust)
            if spec.name in names and spec.mutating and not spec.idempotent]


class ForkUnconfirmed(UserError):
    """A fork (or an eval of runs) would go live where it may call non-idempotent
    operations, and was not confirmed (`--yes`); nothing was forked."""

    def __init__(self, operations: list[LiveRisk]) -> None:
        self.operations = operations
        names = ", ".join(r.name for r in operations)
        super().__init__(f"the fork's live part may call non-idempotent operations ({names}): "
                         "give --yes to fork anyway")
