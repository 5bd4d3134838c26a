"""The audit records of a run's spawns.

Starting a subagent is a run's choice, as a tool call is, so it is audited like
one (decision 0019): a spawn that starts a child is an `audit.operation` record
(operation `agent.spawn`, kind `run.spawn`, outcome ok) sealed in the same
transaction as the parent's `run.child_spawned`; a spawn refused (past the depth
cap, an unknown handler: denied; arguments that do not validate, or what no event
could record: invalid) is a record of its own. A spawn is not an operation of the registry (the child runs in
its parent's nursery, under its parent's trust, narrowed), so the records are made
here, in the executor's shape. Replay writes none: it starts no child live.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from gormes.events.audit import AuditOutcome, OperationAudited, audit_stream
from gormes.events.store import AppendRequest
from gormes.ops.executor import error_text_of
from gormes.ops.input_text import surrogate_text
from gormes.ops.spec import Caller

SPAWN = "agent.spawn"
AUDIT_KIND = "run.spawn"

_encoder = msgspec.json.Encoder(order="deterministic")


class UnrecordableSpawn(Exception):
    """A spawn no event could record (decision 0078): a Python handler's str with a
    lone surrogate (in the handler's name, the input, a tool's name, the model),
    input that is no JSON (an object, a dict with keys not strings), or a handler,
    tool or model name that is not a string (`run.child_spawned` would be written,
    and no gormes could read it back: the run could not be replayed), or input that
    holds itself. `reason` names the place, never the caller's text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def spawn_digest(handler: str, input: Any, tools: tuple[str, ...] | None, model: str | None) -> str:
    """sha256 of what the spawn asked for (canonical JSON): the record's input digest.
    Raises `UnrecordableSpawn` where the encoding fails: what it cannot encode, the
    spawn's event (`run.child_spawned`) could not record either."""
    not_text = _not_a_name(handler, tools, model)
    if not_text is not None:
        raise UnrecordableSpawn(f"invalid spawn: {not_text} is not a string")
    asked = {"handler": handler, "input": input, "tools": tools, "model": model}
    try:
        encoded = _encoder.encode(asked)
    except (UnicodeEncodeError, TypeError):
        raise UnrecordableSpawn(_why_unrecordable(asked)) from None
    except RecursionError:  # msgspec's guard on its own recursion: a value that holds itself
        raise UnrecordableSpawn("invalid spawn: input is not JSON: it holds itself (or nests past"
                                " what can be encoded)") from None
    return hashlib.sha256(encoded).hexdigest()


def _not_a_name(handler: Any, tools: tuple[Any, ...] | None, model: Any) -> str | None:
    """Which of the names is not a string, as the event's fields must be."""
    if not isinstance(handler, str):
        return "handler"
    for i, tool in enumerate(tools or ()):
        if not isinstance(tool, str):
            return f"tools[{i}]"
    if model is not None and not isinstance(model, str):
        return "model"
    return None


def _why_unrecordable(asked: dict[str, Any]) -> str:
    """The first part of the spawn that does not encode, and why (found only once the
    whole did not: the common spawn encodes once)."""
    for part, value in asked.items():
        try:
            _encoder.encode(value)
        except UnicodeEncodeError:
            return f"invalid spawn: {surrogate_text(value, part)}"
        except TypeError as exc:
            return f"invalid spawn: {part} is not JSON: {exc}"
    return "invalid spawn: it is not JSON"  # unreachable: some part failed


def text_digest(text: str) -> str:
    """sha256 of arguments that never validated, as the model sent them."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def spawn_audited(
    caller: Caller, digest: str | None, *, at: int, outcome: AuditOutcome = "ok",
    error_type: str | None = None, reason: str | None = None,
) -> AppendRequest:
    """The audit append request of one spawn (`outcome` ok: the child started)."""
    return AppendRequest(audit_stream(at), [OperationAudited(
        operation=SPAWN, audit_kind=AUDIT_KIND, caller=caller.id, trust=caller.trust,
        run_id=caller.run_id, job_id=caller.job_id, allowed=outcome == "ok", outcome=outcome,
        error=None if error_type is None else error_text_of(error_type, reason or ""),
        duration_ms=0.0, input_sha256=digest, mutating=True, at=at,
    )])
