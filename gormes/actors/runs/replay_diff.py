"""What differs at a divergence: a model request or a tool call, field by field.

    request_diff(recorded, asked)          # two WholeRequests (request_record.py)
    tool_call_diff(recorded_event, operation, args_text)

For a model request: the model; the first message that differs (its index and
role) and each of its fields that differs (content, tool_calls[i].name /
.arguments / .id, tool_call_id, name), or the message only one side has; the
tools offered (names added or removed, or the same names with another schema);
temperature and max_tokens. For a tool call: the operation, and each argument
that only one side has or whose value differs. Values are cut to a readable
length around where they first differ.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gormes.actors.runs.replay_report import Difference, DivergenceDiff
from gormes.actors.runs.request_record import WholeRequest
from gormes.events.runs import RecordedMessage, RecordedToolDigest, RunToolCalled

WIDTH = 60  # characters of a value shown
LEAD = 20  # of them before the first character that differs

_sorted = msgspec.json.Encoder(order="sorted")


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _window(text: str, start: int) -> str:
    piece = text[start: start + WIDTH]
    return ("…" if start else "") + piece + ("…" if start + WIDTH < len(text) else "")


def cut_pair(a: str, b: str) -> tuple[str, str]:
    """Both texts cut to the same window: from their start when it shows where they
    first differ, else from a little before it."""
    first = _first_difference(a, b)
    start = 0 if first + LEAD <= WIDTH else first - LEAD
    return _window(a, start), _window(b, start)


def cut(text: str) -> str:
    return _window(text, 0)


def _quoted(text: str) -> str:
    return _sorted.encode(text).decode()


def _json(value: Any) -> str:
    return _sorted.encode(value).decode()


# -- model requests -------------------------------------------------------------------


def request_diff(recorded: WholeRequest | None, asked: WholeRequest, *, recorded_model: str = "",
                 recorded_count: int | None = None) -> DivergenceDiff:
    """`recorded` None: the turn was recorded with its hash only; `recorded_model`
    and `recorded_count` (its message count) are then all there is to compare."""
    diffs: list[Difference] = []
    if recorded is None:
        if recorded_model and recorded_model != asked.model:
            diffs.append(Difference(what="model", path="model", recorded=recorded_model, asked=asked.model))
        if recorded_count is not None and recorded_count != len(asked.messages):
            diffs.append(Difference(what="message count", path="messages", recorded=str(recorded_count),
                                    asked=str(len(asked.messages))))
        return DivergenceDiff(kind="llm", differences=tuple(diffs), note=(
            "this model turn was recorded with its request's hash only (before requests were kept): "
            "which message differs cannot be shown"
        ))
    if recorded.model != asked.model:
        diffs.append(Difference(what="model", path="model", recorded=recorded.model, asked=asked.model))
    diffs += message_diffs(recorded.messages, asked.messages)
    diffs += tools_diff(recorded.tools, asked.tools)
    for field in ("temperature", "max_tokens"):
        before, now = getattr(recorded, field), getattr(asked, field)
        if before != now:
            diffs.append(Difference(what=field, path=field, recorded=_json(before), asked=_json(now)))
    note = None if diffs else "the requests differ only in their hashes (in nothing the recording keeps)"
    return DivergenceDiff(kind="llm", differences=tuple(diffs), note=note)


def _summary(m: RecordedMessage) -> str:
    text = m.content
    if m.tool_calls:
        text += (" " if text else "") + ", ".join(f"-> {c.name}({c.arguments})" for c in m.tool_calls)
    return _quoted(cut(text))


def message_diffs(recorded: tuple[RecordedMessage, ...], asked: tuple[RecordedMessage, ...]) -> list[Difference]:
    """The first message that differs: each of its fields that does, or the message
    itself when only one side has it."""
    for i, (r, a) in enumerate(zip(recorded, asked)):
        if r != a:
            return _field_diffs(i, r, a)
    if len(recorded) == len(asked):
        return []
    i = min(len(recorded), len(asked))
    extra = recorded[i] if len(recorded) > len(asked) else asked[i]
    more = abs(len(recorded) - len(asked)) - 1
    text = _summary(extra) + (f" (and {more} more)" if more else "")
    on_recorded = len(recorded) > len(asked)
    return [Difference(what="message", path=f"messages[{i}]", index=i, role=extra.role,
                       recorded=text if on_recorded else None, asked=None if on_recorded else text)]


def _field_diffs(i: int, r: RecordedMessage, a: RecordedMessage) -> list[Difference]:
    at = f"messages[{i}]"

    def diff(field: str, before: str | None, now: str | None, quote: bool = True) -> Difference:
        if before is not None and now is not None:
            before, now = cut_pair(before, now)
        elif before is not None:
            before = cut(before)
        elif now is not None:
            now = cut(now)
        if quote:
            before = None if before is None else _quoted(before)
            now = None if now is None else _quoted(now)
        return Difference(what="message", path=f"{at}.{field}", index=i, role=a.role, recorded=before, asked=now)

    diffs: list[Difference] = []
    if r.role != a.role:
        diffs.append(diff("role", r.role, a.role, quote=False))
    if r.content != a.content:
        diffs.append(diff("content", r.content, a.content))
    if len(r.tool_calls) != len(a.tool_calls):
        names = lambda m: ", ".join(c.name for c in m.tool_calls) or "none"  # noqa: E731
        diffs.append(diff("tool_calls", f"{len(r.tool_calls)} ({names(r)})", f"{len(a.tool_calls)} ({names(a)})",
                          quote=False))
    else:
        for j, (rc, ac) in enumerate(zip(r.tool_calls, a.tool_calls)):
            for field in ("name", "arguments", "id"):
                before, now = getattr(rc, field), getattr(ac, field)
                if before != now:
                    diffs.append(diff(f"tool_calls[{j}].{field}", before, now, quote=field != "arguments"))
    for field in ("tool_call_id", "name"):
        before, now = getattr(r, field), getattr(a, field)
        if before != now:
            diffs.append(diff(field, before, now))
    return diffs


def tools_diff(recorded: tuple[RecordedToolDigest, ...], asked: tuple[RecordedToolDigest, ...]) -> list[Difference]:
    before = {t.name: t.digest for t in recorded}
    now = {t.name: t.digest for t in asked}
    added = tuple(sorted(set(now) - set(before)))
    removed = tuple(sorted(set(before) - set(now)))
    if added or removed:
        return [Difference(what="tools", path="tools", added=added, removed=removed)]
    changed = [Difference(what="tools", path=f"tools[{name}]", recorded=before[name], asked=now[name])
               for name in sorted(now) if before[name] != now[name]]
    if changed:
        return changed
    if [t.name for t in recorded] != [t.name for t in asked]:
        return [Difference(what="tools", path="tools", recorded=", ".join(t.name for t in recorded),
                           asked=", ".join(t.name for t in asked))]
    return []


# -- tool calls -------------------------------------------------------------------------

_MISSING = object()


def _decoded(text: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return _MISSING


def tool_call_diff(recorded: RunToolCalled, operation: str, args_text: str) -> DivergenceDiff:
    diffs: list[Difference] = []
    if recorded.operation != operation:
        diffs.append(Difference(what="operation", path="operation", recorded=recorded.operation, asked=operation))
    before, now = _decoded(recorded.arguments), _decoded(args_text)
    if isinstance(before, dict) and isinstance(now, dict):
        for key in sorted(set(before) | set(now)):
            r = _json(before[key]) if key in before else None
            a = _json(now[key]) if key in now else None
            if r == a:
                continue
            if r is not None and a is not None:
                r, a = cut_pair(r, a)
            else:
                r, a = (None if r is None else cut(r)), (None if a is None else cut(a))
            diffs.append(Difference(what="argument", path=f"arguments.{key}", recorded=r, asked=a))
    elif recorded.arguments != args_text:
        r, a = cut_pair(recorded.arguments, args_text)
        diffs.append(Difference(what="arguments", path="arguments", recorded=r, asked=a))
    return DivergenceDiff(kind="tool", differences=tuple(diffs))
