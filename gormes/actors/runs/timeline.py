"""What `gormes runs show` prints: a run folded from its stream, children as a tree.

Cost is computed here, at read time, from a pricing table (the one
`gormes.providers.pricing.load_table` gives unless the caller passes its own); it
is never stored. Each turn is priced, and the run's `cost` is its turns priced
together (`PricingTable.total`, as `gormes.actors.runs.costs` prices them for the
other commands). A model without a price gives `cost: null`. `pricing` names the
table's version.

Tokens: `tokens` is the run's total as it recorded it (its own usage and the
totals of the children it awaited); `own_tokens` its own usage alone; and
`tree_tokens` (with `tree_cost`) every run of its tree, each counted once
whatever its end: a child that failed, was cancelled with its parent, was never
awaited or was cut off with no end spent its tokens too (decision 0035). The
tree is read from the children's own streams, so it costs the size of the tree.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gormes.actors.runs.process import process_state
from gormes.errors import UserError
from gormes.events.jobs import Tokens
from gormes.events.base import RedactedEvent
from gormes.events.runs import (
    RunCancelled,
    RunChildFinished,
    RunChildSpawned,
    RunSpawnRefused,
    RunClockRead,
    RunCompleted,
    RunFailed,
    RunInboxRead,
    RunLlmCut,
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
    tokens_of,
    turn_usage,
)
from gormes.events.log_sql import COLUMNS
from gormes.events.store import EventStore
from gormes.providers.pricing import PricingTable, format_cost, load_table

PREVIEW = 120


def _preview(value: Any) -> str:
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return text if len(text) <= PREVIEW else text[: PREVIEW - 1] + "…"


def _entry(r: Any, table: PricingTable) -> dict[str, Any] | None:
    e = r.event
    base: dict[str, Any] = {"position": r.position, "type": r.type, "seq": getattr(e, "seq", None)}
    if isinstance(e, RunLlmTurn):
        calls = [c.name for c in e.reply.tool_calls]
        usage = turn_usage(e)
        base.update(model=e.model, tokens=msgspec.to_builtins(usage), cost=table.cost(e.model, usage),
                    tool_calls=calls, text=_preview(e.reply.content), duration_ms=e.duration_ms)
    elif isinstance(e, RunLlmFailed):
        base.update(model=e.model, error=e.error, retryable=e.retryable)
        if e.usage is not None:  # a reply the API billed and gormes could not use
            base.update(tokens=msgspec.to_builtins(e.usage), cost=table.cost(e.model, e.usage))
    elif isinstance(e, RunLlmCut):  # cut short after it was sent: what the API bills (decision 0080)
        base.update(model=e.model, at_seq=e.at_seq, duration_ms=e.duration_ms)
        if e.usage is not None:
            base.update(tokens=msgspec.to_builtins(e.usage), cost=table.cost(e.model, e.usage))
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
    elif isinstance(e, RunSpawnRefused):
        base.update(handler=e.handler, text=e.reason)
    elif isinstance(e, RunChildFinished):
        base.update(child_run_id=e.child_run_id, status=e.status, tokens=msgspec.to_builtins(e.tokens),
                    text=_preview(e.result if e.status == "completed" else e.error))
    elif isinstance(e, (RunClockRead, RunRandomDrawn)):
        base.update(value=e.value)
    elif isinstance(e, RunProgressed):
        base.update(text=_preview(e.progress))
    elif isinstance(e, RunTokensAdded):
        base.update(tokens=msgspec.to_builtins(tokens_of(e)))
    elif isinstance(e, RunLogged):
        base.update(level=e.level, text=e.message)
    elif isinstance(e, (RunCompleted, RunFailed, RunCancelled)):
        base.update(tokens=msgspec.to_builtins(e.tokens))
        base["text"] = _preview(e.result) if isinstance(e, RunCompleted) else (
            e.error if isinstance(e, RunFailed) else e.reason)
    else:
        return None
    return base


class TimelinePage(msgspec.Struct, frozen=True, kw_only=True):
    """Which of a run's timeline entries a view holds (the `run.timeline` operation's
    page, decision 0088): those past position `after`, at most `limit` of them and,
    past the first, `max_bytes` of their JSON."""

    after: int | None = None
    limit: int
    max_bytes: int


NO_ENTRIES = TimelinePage(limit=0, max_bytes=0)  # the view without its timeline (run.get)

# What the fold of a run's status, totals and children reads when its entries are
# read a page at a time: the other events (inbox reads, messages, tool calls, log
# lines: what a caller can make large) are left unread, not even fetched.
FOLD_TYPES = tuple(t.__struct_config__.tag for t in (  # type: ignore[attr-defined]
    RunStarted, RunLlmTurn, RunLlmFailed, RunLlmCut, RunTokensAdded, RunChildSpawned, RunChildFinished,
    RunCompleted, RunFailed, RunCancelled,
))
PAGE_ROWS = 16  # the stream's rows read at a time for a page's entries
_ROWS_AFTER = f"SELECT {COLUMNS} FROM events WHERE stream = ? AND position > ? ORDER BY version LIMIT ?"


class _Pager:
    """Takes a page's entries in order; `next`, once one is left out: the position of
    the page's last entry, where the next page starts."""

    def __init__(self, page: TimelinePage) -> None:
        self.page = page
        self.taken: list[dict[str, Any]] = []
        self.size = 0
        self.next: int | None = None

    def offer(self, entry: dict[str, Any]) -> None:
        size = len(msgspec.json.encode(entry))
        if self.taken and (len(self.taken) >= self.page.limit or self.size + size > self.page.max_bytes):
            self.next = self.taken[-1]["position"]
            return
        self.taken.append(entry)
        self.size += size


async def _page_of(store: EventStore, stream: str, page: TimelinePage, table: PricingTable,
                   ) -> tuple[list[dict[str, Any]], int | None]:
    """(the page's entries, its `next`), read `PAGE_ROWS` rows at a time past
    `page.after`: no more of the stream than the page and the row that ends it."""
    if page.limit == 0:
        return [], None
    pager, after = _Pager(page), page.after or 0
    while pager.next is None:
        rows = await store.read_with(
            lambda log, after=after: log.decode(log.sql.execute(_ROWS_AFTER, (stream, after, PAGE_ROWS)).fetchall()))
        for r in rows:
            entry = _entry(r, table)  # None for its run.started, and for what is not an entry
            if entry is not None:
                pager.offer(entry)
            if pager.next is not None:
                break
        if len(rows) < PAGE_ROWS:
            break
        after = rows[-1].position
    return pager.taken, pager.next


async def run_view(store: EventStore, run_id: str, *, tree: bool, table: PricingTable | None = None,
                   page: TimelinePage | None = None) -> dict[str, Any]:
    """The run as `gormes runs show --json` prints it, priced with `table`, with its
    `tree_tokens` and `tree_cost`: every run of its tree, the price of every model
    turn in it (None when one has no price); with `tree`, its children's views in it.
    With `page`, its timeline is that page of it, and `next` says where the next
    starts (None: no entry is left out); the rest of the view is the whole run's,
    folded from the events that make it (`FOLD_TYPES`) alone."""
    view, _, _ = await _view(store, run_id, tree, load_table() if table is None else table, page)
    return view


Turns = list[tuple[str, Tokens]]  # (model, usage) of model turns


async def _view(store: EventStore, run_id: str, tree: bool, table: PricingTable, page: TimelinePage | None = None,
                ) -> tuple[dict[str, Any], Turns, Tokens]:
    """(the view, the model turns of its tree, the own tokens of every run in its tree)."""
    stream = run_stream(run_id)
    if page is None:
        records = await store.read_stream(stream)
    else:
        records = await store.read_with(lambda log: log.read_stream(stream, types=FOLD_TYPES))
    if records and isinstance(records[0].event, RedactedEvent):
        raise RedactedRun(run_id)
    if not records or not isinstance(records[0].event, RunStarted):
        raise UserError(f"no run with id {run_id!r}")
    s = records[0].event
    view: dict[str, Any] = {
        "run_id": run_id, "handler": s.handler, "handler_version": s.handler_version,
        "status": "running", "depth": s.depth, "parent_run_id": s.parent_run_id,
        "job_id": s.job_id, "model": s.model, "trust": s.trust, "scope": s.scope, "input": s.input,
        "started_at": records[0].recorded_at, "finished_at": None, "result": None, "error": None,
        "iterations": 0, "tokens": None, "own_tokens": None, "cost": None, "pricing": table.version,
        "timeline": [],
        # where a fork's or a resumed job attempt's copied prefix came from (decision 0011)
        "forked_from": msgspec.to_builtins(s.forked_from),
        "resumed_from": msgspec.to_builtins(s.resumed_from),
    }
    turns: Turns = []
    tokens = own = Tokens()
    children: list[str] = []
    for r in records[1:]:
        e = r.event
        entry = None if page is not None else _entry(r, table)
        if entry is not None:
            view["timeline"].append(entry)
        if isinstance(e, RunLlmTurn):
            view["iterations"] += 1
            usage = turn_usage(e)
            tokens, own = tokens + usage, own + usage
            turns.append((e.model, usage))
        elif isinstance(e, RunLlmFailed) and e.usage is not None:
            tokens, own = tokens + e.usage, own + e.usage
            turns.append((e.model, e.usage))
        elif isinstance(e, RunLlmCut) and e.usage is not None:
            tokens, own = tokens + e.usage, own + e.usage
            turns.append((e.model, e.usage))
        elif isinstance(e, RunTokensAdded):
            tokens, own = tokens + tokens_of(e), own + tokens_of(e)
        elif isinstance(e, RunChildFinished):
            tokens = tokens + e.tokens
        elif isinstance(e, RunChildSpawned):
            children.append(e.child_run_id)
        elif isinstance(e, (RunCompleted, RunFailed, RunCancelled)):
            view["finished_at"] = r.recorded_at
            view["status"] = {RunCompleted: "completed", RunFailed: "failed", RunCancelled: "cancelled"}[type(e)]
            view["result"] = e.result if isinstance(e, RunCompleted) else None
            view["error"] = e.error if isinstance(e, RunFailed) else e.reason if isinstance(e, RunCancelled) else None
    if page is not None:
        view["timeline"], view["next"] = await _page_of(store, stream, page, table)
    view["tokens"] = msgspec.to_builtins(tokens)
    view["own_tokens"] = msgspec.to_builtins(own)
    view["cost"] = table.total(turns) if turns else None
    # The process that drives it; while the run has no end, whether that process is
    # still there ("gone": killed, so no end can come: gormes/actors/runs/process.py).
    view["process"] = None if s.process is None else {
        "host": s.process.host, "pid": s.process.pid,
        "state": process_state(s.process) if view["finished_at"] is None else None,
    }
    child_views, in_tree, tree_tokens = [], list(turns), own
    for child in children:  # every child, whatever its end (or none: cut off)
        try:
            child_view, child_turns, child_tokens = await _view(
                store, child, True, table, None if page is None else NO_ENTRIES)  # a page: its totals only
        except RedactedRun:  # erased (decision 0026): what it was and spent is gone
            child_view, child_turns, child_tokens = _redacted_view(child), [("", Tokens())], Tokens()
        child_views.append(child_view)
        in_tree += child_turns
        tree_tokens = tree_tokens + child_tokens
    view["children"] = child_views if tree else children
    view["tree_tokens"] = msgspec.to_builtins(tree_tokens)
    view["tree_cost"] = table.total(in_tree)  # 0.0 for a tree with no model turn
    return view, in_tree, tree_tokens


class RedactedRun(UserError):
    """A run whose `run.started` was redacted: there is no run left to show."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} was redacted (its run.started is a tombstone): nothing to show")
        self.run_id = run_id


def _redacted_view(run_id: str) -> dict[str, Any]:
    """A child whose run was redacted, in its parent's tree: its id and status only
    (its cost, and so its tree's, is unknown: None)."""
    return {"run_id": run_id, "status": "redacted", "children": [], "timeline": [], "tokens": None,
            "own_tokens": None, "cost": None, "tree_tokens": None, "tree_cost": None}


_PROCESS_STATES = {
    "alive": "running it",
    "gone": "gone: the run was cut off (killed), no end can come from it",
    "elsewhere": "cannot be checked from here",
}


def format_view(view: dict[str, Any], indent: str = "") -> list[str]:
    if view["status"] == "redacted":
        return [f"{indent}{view['run_id']}  redacted: its events are tombstones, nothing to show"]
    t = view["tokens"]
    head = (f"{indent}{view['run_id']}  {view['handler']}  {view['status']}  depth {view['depth']}  "
            f"turns {view['iterations']}  tokens in {t['input']} out {t['output']} cache {t['cache_read']}"
            f" written {t.get('cache_write', 0)} reasoning {t.get('reasoning', 0)}  "
            f"cost {format_cost(view['cost']) if view['iterations'] else '-'}")
    lines = [head]
    if not indent:  # the tree's totals, once, at its root
        tt = view["tree_tokens"]
        lines.append(f"  tree: tokens in {tt['input']} out {tt['output']} cache {tt['cache_read']}"
                     f" written {tt['cache_write']} reasoning {tt['reasoning']}  cost {format_cost(view['tree_cost'])}"
                     f"  (pricing {view['pricing']})")
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
        if entry["type"] == "run.llm_failed":
            billed = entry.get("tokens")
            text = entry["error"] + (f" (billed: in {billed['input']} out {billed['output']})" if billed else "")
        if entry["type"] == "run.llm_cut":
            billed = entry.get("tokens")
            text = (f"cut short while it streamed (billed: in {billed['input']} out {billed['output']})" if billed
                    else "cut short before its reply reported usage")
        seq = f"#{entry['seq']}" if entry["seq"] is not None else "  "
        lines.append(f"{indent}  {seq:>4} {entry['type']:<18} {detail} {outcome} {text or ''}".rstrip())
    for child in view["children"]:
        if isinstance(child, dict):
            lines.extend(format_view(child, indent + "    "))
    return lines
