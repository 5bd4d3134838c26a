"""A budget's state and its decisions: pure (no I/O, no clock, no pricing file).

`evolve(state, event)` folds the stream `budget-<id>`; `reserve(state, ask, table)`
decides whether a model turn's worst case fits: a `BudgetReserved` to append, or
a `BudgetExhausted` saying which cap it would pass. The caller appends either in
the same transaction that read the stream (gormes/control/budgets.py), so no two
decisions are made on the same state.

What counts against a cap: what was spent (settled turns, per model) plus what is
held (reservations not yet settled nor expired) plus the turn's own worst case.
Tokens count input + output (cache reads and writes are parts of the input,
reasoning part of the output). Cost is priced with the table the caller passes;
a held or asked-for worst case is priced as if every prompt token were written
into the cache when the model's cache write costs more than its input, so that
no way of billing those tokens costs more than was held.
"""

from __future__ import annotations

import math
import msgspec

from gormes.events.budgets import (
    BudgetEvent,
    BudgetExhausted,
    BudgetRaised,
    BudgetReleased,
    BudgetReserved,
    BudgetSet,
    BudgetSettled,
    Policy,
)
from gormes.events.jobs import Tokens
from gormes.providers.base import ModelRequest, Usage, request_json
from gormes.providers.pricing import PricingTable

COST_EPSILON = 1e-12  # float sums of the same dollars in another order differ by less


class Hold(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    job_id: str | None
    model: str
    tokens: Tokens
    expires_at: int


class BudgetState(msgspec.Struct, frozen=True, kw_only=True):
    """A budget as its stream left it (`exists` False: never set). The dicts are
    never changed in place: `evolve` makes new ones."""

    budget_id: str = ""
    version: int = 0
    exists: bool = False
    tokens: int | None = None
    cost: float | None = None
    policy: Policy = "stop"
    output_estimate: int = 4096
    bytes_per_token: float = 1.0
    hold_s: float = 3600.0
    spent: dict[str, Tokens] = {}  # per model
    holds: dict[str, Hold] = {}
    turns: int = 0  # settled turns
    refused: int = 0  # turns refused at a cap
    overrun: int = 0  # tokens used beyond what their turns held (a provider ignoring max_tokens, say)
    paused_jobs: tuple[str, ...] = ()  # jobs the budget paused, not resumed by a raise since
    created_at: int = 0
    updated_at: int = 0


def total(tokens: Tokens) -> int:
    return tokens.input + tokens.output


def evolve(state: BudgetState, event: BudgetEvent) -> BudgetState:
    """The state after one event of the budget's stream (its version moved by one)."""
    version = state.version + 1
    at = getattr(event, "at", state.updated_at)
    if isinstance(event, BudgetSet):
        return msgspec.structs.replace(
            state, budget_id=event.budget_id, version=version, exists=True, tokens=event.tokens,
            cost=event.cost, policy=event.policy, output_estimate=event.output_estimate,
            bytes_per_token=event.bytes_per_token, hold_s=event.hold_s,
            created_at=state.created_at if state.exists else at, updated_at=at,
        )
    if isinstance(event, BudgetRaised):
        # the raise resumed every job still paused by the budget; the others went on otherwise
        return msgspec.structs.replace(state, version=version, tokens=event.tokens, cost=event.cost,
                                       paused_jobs=(), updated_at=at)
    if isinstance(event, BudgetReserved):
        hold = Hold(run_id=event.run_id, job_id=event.job_id, model=event.model, tokens=event.tokens,
                    expires_at=event.expires_at)
        return msgspec.structs.replace(state, version=version, holds={**state.holds, event.hold_id: hold},
                                       updated_at=at)
    if isinstance(event, BudgetSettled):
        holds = dict(state.holds)
        held = holds.pop(event.hold_id, None)
        model = held.model if held is not None else ""
        spent = dict(state.spent)
        spent[model] = spent.get(model, Tokens()) + event.used
        over = max(0, total(event.used) - (total(held.tokens) if held is not None else 0))
        return msgspec.structs.replace(state, version=version, holds=holds, spent=spent, turns=state.turns + 1,
                                       overrun=state.overrun + over, updated_at=at)
    if isinstance(event, BudgetReleased):
        holds = dict(state.holds)
        holds.pop(event.hold_id, None)
        return msgspec.structs.replace(state, version=version, holds=holds, updated_at=at)
    if isinstance(event, BudgetExhausted):
        paused = state.paused_jobs
        if event.job_paused and event.job_id is not None and event.job_id not in paused:
            paused = (*paused, event.job_id)
        return msgspec.structs.replace(state, version=version, refused=state.refused + 1, paused_jobs=paused,
                                       updated_at=at)
    return msgspec.structs.replace(state, version=version)


def fold(budget_id: str, events: list[BudgetEvent], state: BudgetState | None = None) -> BudgetState:
    state = state or BudgetState(budget_id=budget_id)
    for event in events:
        state = evolve(state, event)
    return state


# -- what a turn may use ---------------------------------------------------------------


def worst_case(state: BudgetState, request: ModelRequest) -> Tokens:
    """The most a request may use, as this budget estimates it: its canonical JSON's
    bytes over `bytes_per_token` as input (1.0: a token is at least one byte, so a
    bound), and its max_tokens (else `output_estimate`) as output: a bound, since
    the provider is sent no more (gormes/control/output_ceiling.py)."""
    size = len(request_json(request))
    prompt = math.ceil(size / state.bytes_per_token)
    return Tokens(input=prompt, output=request.max_tokens if request.max_tokens is not None else state.output_estimate)


def held_cost(table: PricingTable, model: str, tokens: Tokens) -> float | None:
    """The most `tokens` (a worst case) may cost on `model`: its prompt priced at the
    dearer of plain input and cache writes."""
    plain = table.cost(model, tokens)
    written = table.cost(model, Usage(input=tokens.input, output=tokens.output, cache_write=tokens.input))
    if plain is None or written is None:
        return None
    return max(plain, written)


class Ask(msgspec.Struct, frozen=True, kw_only=True):
    hold_id: str
    run_id: str
    job_id: str | None
    model: str
    tokens: Tokens  # the worst case
    now: int


class Counted(msgspec.Struct, frozen=True, kw_only=True):
    """What stands against the caps before a turn: spent and held."""

    spent_tokens: int
    held_tokens: int
    spent_cost: float | None  # None: a model of the budget has no price
    held_cost: float | None


def live_holds(state: BudgetState, now: int) -> dict[str, Hold]:
    return {k: h for k, h in state.holds.items() if h.expires_at > now}


def counted(state: BudgetState, table: PricingTable, now: int) -> Counted:
    holds = live_holds(state, now).values()
    spent_cost = table.total(sorted(state.spent.items())) if state.spent else 0.0
    held: float | None = 0.0
    for h in holds:
        one = held_cost(table, h.model, h.tokens)
        held = None if one is None or held is None else held + one
    return Counted(
        spent_tokens=sum(total(t) for t in state.spent.values()), held_tokens=sum(total(h.tokens) for h in holds),
        spent_cost=spent_cost, held_cost=held,
    )


def refusal(state: BudgetState, ask: Ask, table: PricingTable) -> str | None:
    """Why the turn may not go (one line naming the cap), or None: it fits."""
    c = counted(state, table, ask.now)
    need = total(ask.tokens)
    name = f"budget {state.budget_id}"
    if state.tokens is not None and c.spent_tokens + c.held_tokens + need > state.tokens:
        return (f"{name}: this turn's worst case ({need} tokens) would pass its cap of {state.tokens} tokens "
                f"({c.spent_tokens} spent, {c.held_tokens} held by turns in flight)")
    if state.cost is not None:
        cost = held_cost(table, ask.model, ask.tokens)
        if cost is None or c.spent_cost is None or c.held_cost is None:
            unpriced = ask.model if cost is None else "a model it was charged for"
            version = getattr(table, "version", "") or "in use"  # the table's version, where it names one
            return f"{name} caps cost, and {unpriced} has no price in pricing table {version}"
        if c.spent_cost + c.held_cost + cost > state.cost + COST_EPSILON:
            return (f"{name}: this turn's worst case (${cost:.6f}) would pass its cap of ${state.cost:.6f} "
                    f"(${c.spent_cost:.6f} spent, ${c.held_cost:.6f} held by turns in flight)")
    return None


def reserve(state: BudgetState, ask: Ask, table: PricingTable) -> BudgetReserved | BudgetExhausted:
    why = refusal(state, ask, table)
    if why is not None:
        return BudgetExhausted(run_id=ask.run_id, job_id=ask.job_id, model=ask.model, tokens=ask.tokens,
                               reason=why, policy=state.policy, at=ask.now)
    return BudgetReserved(hold_id=ask.hold_id, run_id=ask.run_id, job_id=ask.job_id, model=ask.model,
                          tokens=ask.tokens, expires_at=ask.now + int(state.hold_s * 1000), at=ask.now)


# -- the operator's changes ------------------------------------------------------------


def raised_cap(current: float | None, by: float | None, to: float | None) -> float | None:
    """The cap after `raise --by/--to` (None: uncapped stays uncapped); ValueError
    when it would lower the cap."""
    if current is None:
        return None
    new = current + by if by is not None else to
    assert new is not None
    if new < current:
        raise ValueError(f"{new:g} is below the current cap of {current:g}: raise only raises "
                         "(`budget set` sets a lower one)")
    return new
