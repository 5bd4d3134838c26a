"""Budget events: a budget's whole life on its own stream `budget-<id>`.

A budget caps what the runs charged to it may spend, in tokens and/or priced
cost (decision 0030). It is set and raised by the operator; each model turn of a
charged run first reserves its worst case (`budget.reserved`, refused as
`budget.exhausted` when that would pass a cap), then settles to what the provider
reported (`budget.settled`) or gives the reservation back (`budget.released`).
Every one of them is appended with the stream's expected version in the same
transaction that read the stream, so every decision sees every earlier one.

Cost is never stored: events carry the model and its token counts, and the cap is
checked with the pricing table (gormes/providers/pricing.py) when a turn asks.

The stream `budget-index` names each budget once (`budget.indexed`), so that
`gormes budget list` need not scan the log. Times are integer milliseconds.
"""

from __future__ import annotations

from typing import Literal

from gormes.events.base import Event
from gormes.events.jobs import Tokens

BUDGET_STREAM_PREFIX = "budget-"
INDEX_STREAM = "budget-index"

Policy = Literal["stop", "pause"]


def budget_stream(budget_id: str) -> str:
    return BUDGET_STREAM_PREFIX + budget_id


class BudgetSet(Event, tag="budget.set", kw_only=True):
    """A budget created, or its caps and policy set again (a cap None: not capped)."""

    budget_id: str
    tokens: int | None = None  # input + output tokens
    cost: float | None = None  # US dollars, priced with the pricing table of the turn
    policy: Policy = "stop"
    output_estimate: int = 4096  # output tokens reserved for a request with no max_tokens: the most it may write
    bytes_per_token: float = 1.0  # the prompt's size estimate: its JSON bytes over this
    hold_s: float = 3600.0  # a reservation never settled (its process died) expires after this
    by: str = ""  # who set it (the caller's trust class and id)
    at: int


class BudgetRaised(Event, tag="budget.raised", kw_only=True):
    """New caps (higher, or a cap removed); the jobs the budget paused may go on."""

    tokens: int | None = None
    cost: float | None = None
    resumed_jobs: tuple[str, ...] = ()  # the paused jobs resumed with this raise
    by: str = ""
    at: int


class BudgetReserved(Event, tag="budget.reserved", kw_only=True):
    """A model turn's worst case, held against the caps until it settles."""

    hold_id: str
    run_id: str
    job_id: str | None = None
    model: str
    tokens: Tokens  # input: the prompt's size estimate; output: max_tokens or the estimate
    expires_at: int
    at: int


class BudgetSettled(Event, tag="budget.settled", kw_only=True):
    """The turn answered: what it used replaces what it held."""

    hold_id: str
    used: Tokens
    at: int


class BudgetReleased(Event, tag="budget.released", kw_only=True):
    """The turn failed or was cancelled: nothing it held is spent."""

    hold_id: str
    reason: str = ""
    at: int


class BudgetExhausted(Event, tag="budget.exhausted", kw_only=True):
    """A turn refused before its request left: its worst case would pass a cap.
    `job_paused`: the policy is pause and the run's job was paused in the same
    transaction, until a raise (a run of no job waits where it is)."""

    run_id: str
    job_id: str | None = None
    model: str
    tokens: Tokens  # the worst case it asked for
    reason: str
    policy: Policy
    job_paused: bool = False
    at: int


class BudgetIndexed(Event, tag="budget.indexed", kw_only=True):
    budget_id: str
    at: int


BudgetEvent = BudgetSet | BudgetRaised | BudgetReserved | BudgetSettled | BudgetReleased | BudgetExhausted
