"""`gormes top`'s approvals panel and budgets line: what waits for a person, and
what each budget has spent, holds and may spend.

    watch = ControlWatch(store)
    approvals, budgets = await watch.read(now=time.time(), pricing=table)

Cheap reads only, one read connection a refresh: the pending approvals, through
the approvals index (gormes/projections/approval_index.py: the pending ones'
events, never the whole stream; the first read builds the index where no write
has, if the store may write), and each `budget-<id>` stream (the budget index
says which exist), read from where the previous refresh left it and folded onto
what was folded before (gormes/control/budget_rules.py `fold`), so a refresh reads
only the budget events that are new. The rows and their drawing are pure;
deciding goes through the operations (gormes/dashboard/steer.py).
"""

from __future__ import annotations

from typing import Any

import msgspec
from rich.text import Text

from gormes.actors.runs.approval_book import index_approvals
from gormes.control.budget_book import view
from gormes.control.budget_rules import BudgetState, fold
from gormes.events.approvals import Approval
from gormes.events.budgets import INDEX_STREAM, BudgetIndexed, budget_stream
from gormes.events.store import EventStore
from gormes.printable import printable
from gormes.projections.approval_index import approvals_on
from gormes.providers import pricing as prices
from gormes.providers.pricing import PricingTable

BUDGETS_SHOWN = 6  # on the budgets line; the rest are counted


class ApprovalRow(msgspec.Struct, frozen=True, kw_only=True):
    """A pending approval request."""

    id: str
    operation: str
    run_id: str | None  # None: a call outside any run (an MCP client's)
    job_id: str | None
    caller: str  # who asks: "run-<id>", "mcp:<client name>"
    trust: str
    why: str
    age_s: float  # since it was requested
    expires_in_s: float | None = None  # None: it waits until decided


class BudgetRow(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    policy: str
    spent_tokens: int
    held_tokens: int
    tokens_cap: int | None
    spent_cost: float | None  # None: a model it was charged for has no price
    held_cost: float | None
    cost_cap: float | None
    paused_jobs: int = 0
    refused: int = 0

    @property
    def at_cap(self) -> bool:
        full_tokens = self.tokens_cap is not None and self.spent_tokens + self.held_tokens >= self.tokens_cap
        full_cost = (self.cost_cap is not None and self.spent_cost is not None and self.held_cost is not None
                     and self.spent_cost + self.held_cost >= self.cost_cap)
        return full_tokens or full_cost or self.paused_jobs > 0


def approval_row(a: Approval, now: float) -> ApprovalRow:
    r = a.request
    return ApprovalRow(
        id=r.approval_id, operation=r.operation, run_id=r.run_id, job_id=r.job_id, caller=r.caller,
        trust=r.trust, why=r.why, age_s=round(max(0.0, now - r.at / 1000), 1),
        expires_in_s=None if r.expires_at is None else round(r.expires_at / 1000 - now, 1),
    )


def pending_rows(approvals: dict[str, Approval], now: float) -> tuple[ApprovalRow, ...]:
    """The pending requests, oldest first (the one waiting longest on top)."""
    pending = sorted((a for a in approvals.values() if a.pending), key=lambda a: a.requested_position)
    return tuple(approval_row(a, now) for a in pending)


def budget_row(state: BudgetState, table: PricingTable, now: float) -> BudgetRow:
    v = view(state, table, int(now * 1000))
    return BudgetRow(
        id=v.id, policy=v.policy, spent_tokens=v.spent_tokens, held_tokens=v.held_tokens, tokens_cap=v.tokens_cap,
        spent_cost=v.spent_cost, held_cost=v.held_cost, cost_cap=v.cost_cap, paused_jobs=len(v.paused_jobs),
        refused=v.refused,
    )


class ControlWatch:
    """The budgets streams as last read; each `read` reads what is newer, and the
    pending approvals."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._index_version = 0
        self._budget_ids: list[str] = []
        self._budgets: dict[str, BudgetState] = {}
        self._indexed = False

    def _read(self, log: Any) -> tuple[dict[str, Approval], list[Any], dict[str, list[Any]]]:
        approvals = approvals_on(log.sql, log.decode, status="pending")
        index = log.read_stream(INDEX_STREAM, self._index_version)
        known = set(self._budget_ids)
        ids = self._budget_ids + [r.event.budget_id for r in index
                                  if isinstance(r.event, BudgetIndexed) and r.event.budget_id not in known]
        budgets = {
            b: log.read_stream(budget_stream(b), self._budgets[b].version if b in self._budgets else 0)
            for b in ids
        }
        return approvals, index, budgets

    async def read(self, *, now: float, pricing: PricingTable) -> tuple[tuple[ApprovalRow, ...], tuple[BudgetRow, ...]]:
        if not self._indexed:  # else each refresh of a never-indexed database folds the whole stream
            await index_approvals(self.store)
            self._indexed = True
        approvals, index, budgets = await self.store.read_with(self._read)
        if index:
            self._index_version = index[-1].version
        for budget_id, records in budgets.items():
            if budget_id not in self._budget_ids:
                self._budget_ids.append(budget_id)
            known = self._budgets.get(budget_id)
            self._budgets[budget_id] = fold(budget_id, [r.event for r in records], known)
        rows = tuple(budget_row(self._budgets[b], pricing, now) for b in sorted(self._budget_ids)
                     if self._budgets[b].exists)
        return pending_rows(approvals, now), rows


# -- drawing (pure) ----------------------------------------------------------------------


def _cost(dollars: float | None) -> str:
    return "?" if dollars is None else prices.format_cost(dollars)


def budget_text(row: BudgetRow) -> str:
    """`team-a 1,200/5,000 tok (held 300)`, `job:01AB $0.12/$1.00 (held $0.01)`, or both."""
    parts = []
    if row.tokens_cap is not None or row.cost_cap is None:
        cap = "no cap" if row.tokens_cap is None else f"{row.tokens_cap:,}"
        parts.append(f"{row.spent_tokens:,}/{cap} tok" + (f" (held {row.held_tokens:,})" if row.held_tokens else ""))
    if row.cost_cap is not None:
        held = f" (held {_cost(row.held_cost)})" if row.held_cost else ""
        parts.append(f"{_cost(row.spent_cost)}/{_cost(row.cost_cap)}{held}")
    paused = f" {row.paused_jobs} paused" if row.paused_jobs else ""
    return f"{row.id} {', '.join(parts)}{paused}"


def budgets_line(rows: tuple[BudgetRow, ...]) -> Text | None:
    """One line: each budget's spent / cap (held by turns in flight); a budget at its
    cap (or pausing jobs) in red. None when there is no budget."""
    if not rows:
        return None
    line = Text("budgets: ", style="bold")
    for i, row in enumerate(rows[:BUDGETS_SHOWN]):
        if i:
            line.append("  ·  ", style="dim")
        line.append(printable(budget_text(row)), style="bold red" if row.at_cap else "")
    if len(rows) > BUDGETS_SHOWN:
        line.append(f"  (+{len(rows) - BUDGETS_SHOWN} more: gormes budget list)", style="dim")
    return line


def _age(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m" if seconds < 7200 else f"{seconds / 3600:.0f}h"


def approval_cells(row: ApprovalRow, marker: str) -> list[Any]:
    expires = "" if row.expires_in_s is None else f"{_age(max(0.0, row.expires_in_s))} left"
    return [
        Text(printable(f"{marker} {row.id}")), Text(printable(row.operation), style="bold"),
        Text(printable(row.job_id or row.run_id or "-")), Text(printable(f"{row.caller} ({row.trust})")),
        Text(_age(row.age_s)), Text(expires), Text(printable(row.why)),
    ]
