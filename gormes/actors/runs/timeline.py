"""What `gormes runs show` prints: a run folded from its stream, children as a tree.

Cost is computed here, at read time, from the providers' pricing table; it is
never stored. A model without a price gives `cost: null`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gormes.actors.runs.process import process_state
from gormes.errors import UserError
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    RunCancelled,
    RunChildFinished,
    RunChildSpawned,
    RunClockRead,
    RunCompleted,
    RunFailed,
    RunInboxRead,
    RunLlmFailed,
    RunLlmTurn,
    RunLogged,
    RunMessageSent,
    RunProgressed,
    RunRandomDrawn,
    RunStarted,
    RunTokensAdded,
    RunToolCalled,
    run_stream,
)

PREVIEW = 120


def _cost(model: str, usage: Tokens) -> float | None:
    try:
        from gormes.providers.base import Usage
        from gormes.providers.pricing import cost
    except ImportError:  # pragma: no cover - pricing ships with the providers
        return None
    return cost(model, Usage(input=usage.input, output=usage.output, cache_read=usage.cache_read))


def _preview(value: Any) -> str:
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return text if len(text) <= PREVIEW else text[: PREVIEW - 1] + "…"


def _entry(r: Any) -> dict[str, Any] | None:
    e = r.event
    base: dict[str, Any] = {"position": r.position, "type": r.type, "seq": getattr(e, "seq", None)}
    if isinstance(e, RunLlmTurn):
        calls = [c.name for c in e.reply.tool_calls]
        base.update(model=e.model, tokens=msgspec.to_builtins(e.usage), cost=_cost(e.model, e.usage),
                    tool_calls=calls, text=_preview(e.reply.content), duration_ms=e.duration_ms)
    elif isinstance(e, RunLlmFailed):
        base.update(error=e.error, retryable=e.retryable)
    elif isinstance(e, RunToolCalled):
        base.update(operation=e.operation, arguments=e.arguments, outcome=e.outcome,
                    text=_preview(e.result if e.outcome == "ok" else e.error), duration_ms=e.duration_ms)
    elif isinstance(e, RunInboxRead):
        if not e.messages:
            return None  # an empty read is recorded for replay; not worth a line here
        base.update(messages=[msgspec.to_builtins(m) for m in e.messages])
    elif isinstance(e, RunMessageSent):
        base.update(message_id=e.message_id, sender=e.sender, text=_preview(e.payload))
    elif isinstance(e, RunChildSpawned):
        base.update(child_run_id=e.child_run_id, handler=e.handler, text=_preview(e.input))
    elif isinstance(e, RunChildFinished):
        base.update(child_run_id=e.child_run_id, status=e.status, tokens=msgspec.to_builtins(e.tokens),
                    text=_preview(e.result if e.status == "completed" else e.error))
    elif isinstance(e, (RunClockRead, RunRandomDrawn)):
        base.update(value=e.value)
    elif isinstance(e, RunProgressed):
        base.update(text=_preview(e.progress))
    elif isinstance(e, RunTokensAdded):
        base.update(tokens={"input": e.input, "output": e.output, "cache_read": e.cache_read})
    elif isinstance(e, RunLogged):
        base.update(level=e.level, text=e.message)
    elif isinstance(e, (RunCompleted, RunFailed, RunCancelled)):
        base.update(tokens=msgspec.to_builtins(e.tokens))
        base["text"] = _preview(e.result) if isinstance(e, RunCompleted) else (
            e.error if isinstance(e, RunFailed) else e.reason)
    else:
        return None
    return base


async def run_view(store: Any, run_id: str, *, tree: bool) -> dict[str, Any]:
    records = await store.read_stream(run_stream(run_id))
    if not records or not isinstance(records[0].event, RunStarted):
        raise UserError(f"no run with id {run_id!r}")
    s = records[0].event
    view: dict[str, Any] = {
        "run_id": run_id, "handler": s.handler, "handler_version": s.handler_version,
        "status": "running", "depth": s.depth, "parent_run_id": s.parent_run_id,
        "job_id": s.job_id, "model": s.model, "trust": s.trust, "scope": s.scope, "input": s.input,
        "started_at": records[0].recorded_at, "finished_at": None, "result": None, "error": None,
        "iterations": 0, "tokens": None, "cost": None, "timeline": [],
        # where a fork's or a resumed job attempt's copied prefix came from (decision 0011)
        "forked_from": msgspec.to_builtins(s.forked_from),
        "resumed_from": msgspec.to_builtins(s.resumed_from),
    }
    own_cost: float | None = 0.0
    tokens = Tokens()
    children: list[str] = []
    for r in records[1:]:
        e = r.event
        entry = _entry(r)
        if entry is not None:
            view["timeline"].append(entry)
        if isinstance(e, RunLlmTurn):
            view["iterations"] += 1
            tokens = tokens + e.usage
            c = entry["cost"] if entry else None
            own_cost = None if own_cost is None or c is None else own_cost + c
        elif isinstance(e, RunTokensAdded):
            tokens = tokens + Tokens(input=e.input, output=e.output, cache_read=e.cache_read)
        elif isinstance(e, RunChildFinished):
            tokens = tokens + e.tokens
        elif isinstance(e, RunChildSpawned):
            children.append(e.child_run_id)
        elif isinstance(e, (RunCompleted, RunFailed, RunCancelled)):
            view["finished_at"] = r.recorded_at
            view["status"] = {RunCompleted: "completed", RunFailed: "failed", RunCancelled: "cancelled"}[type(e)]
            view["result"] = e.result if isinstance(e, RunCompleted) else None
            view["error"] = e.error if isinstance(e, RunFailed) else e.reason if isinstance(e, RunCancelled) else None
    view["tokens"] = msgspec.to_builtins(tokens)
    view["cost"] = own_cost if view["iterations"] else None
    # The process that drives it; while the run has no end, whether that process is
    # still there ("gone": killed, so no end can come: gormes/actors/runs/process.py).
    view["process"] = None if s.process is None else {
        "host": s.process.host, "pid": s.process.pid,
        "state": process_state(s.process) if view["finished_at"] is None else None,
    }
    view["children"] = [await run_view(store, c, tree=True) for c in children] if tree else children
    if tree:
        view["tree_cost"] = _tree_cost(view)
    return view


def _tree_cost(view: dict[str, Any]) -> float | None:
    total = view["cost"] or 0.0
    unknown = view["cost"] is None and view["iterations"] > 0
    for child in view["children"]:
        c = _tree_cost(child)
        unknown = unknown or c is None
        total += c or 0.0
    return None if unknown else round(total, 8)


_PROCESS_STATES = {
    "alive": "running it",
    "gone": "gone: the run was cut off (killed), no end can come from it",
    "elsewhere": "cannot be checked from here",
}


def format_view(view: dict[str, Any], indent: str = "") -> list[str]:
    from gormes.providers.pricing import format_cost

    t = view["tokens"]
    head = (f"{indent}{view['run_id']}  {view['handler']}  {view['status']}  depth {view['depth']}  "
            f"turns {view['iterations']}  tokens in {t['input']} out {t['output']} cache {t['cache_read']}  "
            f"cost {format_cost(view['cost']) if view['iterations'] else '-'}")
    lines = [head]
    # whom its tool calls act for (decision 0016); no scope: its class's default
    scope = view["scope"] or "(its class's default)"
    lines.append(f"{indent}  trust {view['trust']}  scope {scope}")
    for key, what in (("resumed_from", "resumes"), ("forked_from", "forked from")):
        origin = view.get(key)
        if origin:
            lines.append(f"{indent}  {what} run {origin['run_id']} (its events up to position "
                         f"{origin['position']} replayed, not redone)")
    if view.get("error"):
        lines.append(f"{indent}  error: {view['error']}")
    process = view.get("process")
    if process and process["state"]:
        lines.append(f"{indent}  process {process['pid']} on {process['host']}: {_PROCESS_STATES[process['state']]}")
    for entry in view["timeline"]:
        detail = entry.get("operation") or entry.get("child_run_id") or entry.get("model") or ""
        outcome = entry.get("outcome") or entry.get("status") or ""
        text = entry.get("text")
        if entry.get("tool_calls"):
            text = f"calls {', '.join(entry['tool_calls'])}"
        if entry["type"] == "run.inbox_read":
            text = "; ".join(f"{m['sender']}: {_preview(m['payload'])}" for m in entry["messages"])
        seq = f"#{entry['seq']}" if entry["seq"] is not None else "  "
        lines.append(f"{indent}  {seq:>4} {entry['type']:<18} {detail} {outcome} {text or ''}".rstrip())
    for child in view["children"]:
        if isinstance(child, dict):
            lines.extend(format_view(child, indent + "    "))
    return lines
