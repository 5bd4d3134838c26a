"""The operator's side of budgets: set, raise, show and list (gormes/tools/budgets.py
calls these through the executor, so each change is audited).

Setting a budget that exists sets its caps and policy again (lower too); raising
only raises, and resumes, in the same transaction, every job still parked on the
budget (gormes/actors/jobs/parking.py), none paused for another reason. Both
append with the stream's expected version, so a raise and a reservation never
decide on the same state.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import msgspec

from gormes.actors.jobs.parking import unpark_in
from gormes.control.budget_rules import BudgetState, counted, fold, raised_cap
from gormes.control.budgets import CLASS_BUDGETED, UnknownBudget
from gormes.errors import UserError
from gormes.events.budgets import INDEX_STREAM, BudgetIndexed, BudgetRaised, BudgetSet, Policy, budget_stream
from gormes.events.jobs import Tokens
from gormes.events.audit_seal import with_seal
from gormes.events.store import EventStore, Transaction
from gormes.providers.pricing import PricingTable, load_table

BUDGET_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}")


class InvalidBudget(UserError):
    """A budget that cannot be set or raised as asked (nothing was written)."""


def check_id(budget_id: str) -> str:
    if not BUDGET_ID.fullmatch(budget_id):
        raise InvalidBudget(f"budget id {budget_id!r}: letters, digits and . _ : @ / -, at most 200, "
                            "starting with a letter or digit (job:ID and scope:NAME are found by runs)")
    kind, _, trust = budget_id.partition(":")
    if kind == "trust" and trust not in CLASS_BUDGETED:
        # no run would ever pay into it: accepted, it said a cap that nothing kept
        raise InvalidBudget(f"budget id {budget_id!r}: only {' and '.join(f'trust:{c}' for c in CLASS_BUDGETED)}"
                            " cap a trust class; the operator's and the system's runs have no class budget")
    return budget_id


def check_not_negative(budget_id: str, **values: float | None) -> None:
    for name, value in values.items():
        if value is not None and value < 0:
            raise InvalidBudget(f"budget {budget_id}: {name.replace('_', ' ')} {value:g} is negative: "
                                "a negative budget is no budget")


def check_output_estimate(budget_id: str, output_estimate: int) -> None:
    """The estimate is the most a turn with no max_tokens may write (decision 0065):
    0 would send every such turn a max_tokens that every API refuses."""
    if output_estimate < 1:
        raise InvalidBudget(f"budget {budget_id}: output estimate {output_estimate} is below 1: it is the most "
                            "output a turn may write, and a turn must be able to write something")


class BudgetView(msgspec.Struct, kw_only=True):
    """A budget as it stands: caps, what was spent and what is held, priced now."""

    id: str
    tokens_cap: int | None
    cost_cap: float | None  # US dollars
    policy: Policy
    spent_tokens: int  # input + output of settled turns
    spent: Tokens  # their counts by kind
    spent_cost: float | None  # None: a model it was charged for has no price
    held_tokens: int  # worst cases of turns in flight
    held_cost: float | None
    tokens_left: int | None
    cost_left: float | None
    turns: int
    refused: int
    overrun_tokens: int  # used beyond what turns held (a provider ignoring max_tokens, a prompt estimate)
    paused_jobs: list[str]
    output_estimate: int
    bytes_per_token: float
    hold_s: float
    pricing: str  # the table the costs were priced with (docs/providers.md)
    created_at: int
    updated_at: int


def view(state: BudgetState, table: PricingTable, now: int) -> BudgetView:
    c = counted(state, table, now)
    spent = Tokens()
    for t in state.spent.values():
        spent = spent + t
    tokens_left = None if state.tokens is None else max(0, state.tokens - c.spent_tokens - c.held_tokens)
    cost_left = None
    if state.cost is not None and c.spent_cost is not None and c.held_cost is not None:
        cost_left = max(0.0, state.cost - c.spent_cost - c.held_cost)
    return BudgetView(
        id=state.budget_id, tokens_cap=state.tokens, cost_cap=state.cost, policy=state.policy,
        spent_tokens=c.spent_tokens, spent=spent, spent_cost=c.spent_cost, held_tokens=c.held_tokens,
        held_cost=c.held_cost, tokens_left=tokens_left, cost_left=cost_left, turns=state.turns,
        refused=state.refused, overrun_tokens=state.overrun, paused_jobs=list(state.paused_jobs),
        output_estimate=state.output_estimate, bytes_per_token=state.bytes_per_token, hold_s=state.hold_s,
        pricing=getattr(table, "version", ""), created_at=state.created_at, updated_at=state.updated_at,
    )


def _load(tx: Transaction, budget_id: str) -> BudgetState:
    return fold(budget_id, [r.event for r in tx.read_stream(budget_stream(budget_id))])


class BudgetBook:
    def __init__(self, store: EventStore, *, clock: Callable[[], float] = time.time,
                 pricing: PricingTable | None = None) -> None:
        self.store = store
        self.clock = clock
        self._pricing = pricing

    @property
    def pricing(self) -> PricingTable:
        if self._pricing is None:
            self._pricing = load_table()
        return self._pricing

    def _now(self) -> int:
        return int(self.clock() * 1000)

    async def set(
        self, budget_id: str, *, tokens: int | None = None, cost: float | None = None, policy: Policy = "stop",
        output_estimate: int = 4096, bytes_per_token: float = 1.0, hold_s: float = 3600.0, by: str = "",
    ) -> BudgetView:
        check_id(budget_id)
        check_not_negative(budget_id, tokens=tokens, cost=cost, output_estimate=output_estimate, hold_s=hold_s)
        check_output_estimate(budget_id, output_estimate)
        if bytes_per_token <= 0:
            raise InvalidBudget(f"budget {budget_id}: bytes per token must be above 0")
        now = self._now()
        event = BudgetSet(budget_id=budget_id, tokens=tokens, cost=cost, policy=policy,
                          output_estimate=output_estimate, bytes_per_token=bytes_per_token, hold_s=hold_s,
                          by=by, at=now)

        def write(tx: Transaction) -> BudgetState:
            state = _load(tx, budget_id)
            if not state.exists:
                tx.append(INDEX_STREAM, [BudgetIndexed(budget_id=budget_id, at=now)])
            tx.append(budget_stream(budget_id), [event], state.version)
            return fold(budget_id, [event], state)

        return view(await self.store.transact(with_seal(write)), self.pricing, now)

    async def raise_(
        self, budget_id: str, *, by: float | None = None, to: float | None = None, cap: str | None = None,
        caller: str = "",
    ) -> BudgetView:
        """Raise the budget's one cap (or `cap`, "tokens" or "cost", when it has both)
        by `by` or to `to`; resume the jobs it paused."""
        if (by is None) == (to is None):
            raise InvalidBudget("give one of --by and --to")
        check_not_negative(budget_id, by=by, to=to)
        now = self._now()

        def write(tx: Transaction) -> BudgetState:
            state = _load(tx, budget_id)
            if not state.exists:
                raise UnknownBudget(f"unknown budget {budget_id!r}")
            which = _which_cap(state, cap)
            tokens, cost = state.tokens, state.cost
            try:
                if which == "tokens":
                    if any(v is not None and v != int(v) for v in (by, to)):
                        raise InvalidBudget(f"budget {budget_id}: a token cap is a whole number")
                    new = raised_cap(state.tokens, by, to)
                    tokens = None if new is None else int(new)
                else:
                    cost = raised_cap(state.cost, by, to)
            except ValueError as exc:
                raise InvalidBudget(f"budget {budget_id}: {exc}") from None
            # the jobs it parked, if still parked on it (not those paused for another reason since)
            resumed = [j for j in state.paused_jobs if unpark_in(tx, now, j, on=budget_stream(budget_id))]
            event = BudgetRaised(tokens=tokens, cost=cost, resumed_jobs=tuple(resumed), by=caller, at=now)
            tx.append(budget_stream(budget_id), [event], state.version)
            return fold(budget_id, [event], state)

        return view(await self.store.transact(with_seal(write)), self.pricing, now)

    async def get(self, budget_id: str) -> BudgetView:
        records = await self.store.read_stream(budget_stream(budget_id))
        state = fold(budget_id, [r.event for r in records])
        if not state.exists:
            raise UnknownBudget(f"unknown budget {budget_id!r}")
        return view(state, self.pricing, self._now())

    async def list(self) -> list[BudgetView]:
        index = await self.store.read_stream(INDEX_STREAM)
        ids = [r.event.budget_id for r in index if isinstance(r.event, BudgetIndexed)]
        streams = await self.store.read_with(lambda log: log.read_streams([budget_stream(i) for i in ids]))
        now, table = self._now(), self.pricing
        return [view(fold(i, [r.event for r in streams[budget_stream(i)]]), table, now) for i in sorted(ids)]


def _which_cap(state: BudgetState, cap: str | None) -> str:
    caps = [name for name, value in (("tokens", state.tokens), ("cost", state.cost)) if value is not None]
    if cap is not None:
        if cap not in caps:
            raise InvalidBudget(f"budget {state.budget_id} has no {cap} cap to raise")
        return cap
    if not caps:
        raise InvalidBudget(f"budget {state.budget_id} has no cap to raise")
    if len(caps) == 2:
        raise InvalidBudget(f"budget {state.budget_id} caps tokens and cost: say which with --cap tokens|cost")
    return caps[0]


__all__ = ["BudgetBook", "BudgetView", "InvalidBudget", "check_id", "check_not_negative", "view"]
