"""budget.set, budget.raise, budget.show and budget.list: the operator's budgets.

Operator-only and never offered to models: a budget caps what every run charged
to it may spend, so a run or a gateway that could raise one would lift its own
cap. `gormes budget set|raise|show|list` call these, audited like every other
operation (decision 0019). `gormes mcp --trust operator` serves show, list and
raise to an operator's own MCP client (`operator_mcp`, decision 0037); no other
class's server and no model's tool list has any of them. The meter is
gormes/control/budgets.py (decision 0030).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from gormes.control.budget_book import BudgetBook, BudgetView, InvalidBudget, check_id, check_not_negative, check_output_estimate
from gormes.ops.spec import OperationContext, OperationSpec, OperationUnavailable

OPERATOR = frozenset({"operator"})

BudgetId = Annotated[str, msgspec.Meta(
    min_length=1, max_length=200,
    description="The budget's id: a name given to runs and jobs, job:JOB_ID (that job's runs), "
                "scope:NAME (every run of that memory scope) or trust:gateway / trust:child-agent "
                "(every run of that trust class).")]
NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class BudgetSetInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Create a budget, or set its caps and policy again."""

    id: BudgetId
    tokens: Annotated[int | None, msgspec.Meta(description="Cap in tokens (input + output).")] = None
    cost: Annotated[float | None, msgspec.Meta(description="Cap in US dollars, priced with the pricing table.")] = None
    policy: Annotated[Literal["stop", "pause"], msgspec.Meta(
        description="At the cap: stop the run (BudgetExceeded), or pause its job until a raise.")] = "stop"
    output_estimate: Annotated[int, msgspec.Meta(
        description="Output tokens a request with no max_tokens reserves.")] = 4096
    bytes_per_token: Annotated[float, msgspec.Meta(
        description="The prompt's estimate: its JSON bytes over this (1: a bound; more: tighter, not a bound).")] = 1.0
    hold_s: Annotated[float, msgspec.Meta(
        description="Seconds after which a reservation never settled (its process died) stops counting.")] = 3600.0

    # Checked as the input is decoded, by every door, before anything is opened.
    def __post_init__(self) -> None:
        check_id(self.id)
        check_not_negative(self.id, tokens=self.tokens, cost=self.cost, output_estimate=self.output_estimate,
                           hold_s=self.hold_s)
        check_output_estimate(self.id, self.output_estimate)


class BudgetRaiseInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Raise a budget's cap by an amount or to a value; resumes the jobs it paused."""

    id: BudgetId
    by: Annotated[float | None, msgspec.Meta(description="Add this to the cap.")] = None
    to: Annotated[float | None, msgspec.Meta(description="Set the cap to this (not lower).")] = None
    cap: Annotated[Literal["tokens", "cost"] | None, msgspec.Meta(
        description="Which cap, when the budget has both.")] = None

    def __post_init__(self) -> None:
        check_not_negative(self.id, by=self.by, to=self.to)


class BudgetIdInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The budget to show."""

    id: BudgetId


class BudgetListInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Every budget."""


class BudgetList(msgspec.Struct, kw_only=True):
    budgets: list[BudgetView]


def _book(ctx: OperationContext) -> BudgetBook:
    if ctx.store is None:
        raise OperationUnavailable("the budget operations need an event store")
    return BudgetBook(ctx.store, clock=ctx.clock)


def _by(ctx: OperationContext) -> str:
    return f"{ctx.caller.trust}:{ctx.caller.id}"


async def budget_set(ctx: OperationContext, value: BudgetSetInput) -> BudgetView:
    kind, _, job_id = value.id.partition(":")
    if kind == "job" and ctx.jobs is not None and await ctx.jobs.get(job_id) is None:
        # a job's budget is found by its runs when they start: a mistyped id caps nothing
        raise InvalidBudget(f"budget {value.id}: no job {job_id} (set a job's budget after `gormes jobs submit`,"
                            " with the id it printed)")
    return await _book(ctx).set(
        value.id, tokens=value.tokens, cost=value.cost, policy=value.policy, output_estimate=value.output_estimate,
        bytes_per_token=value.bytes_per_token, hold_s=value.hold_s, by=_by(ctx),
    )


async def budget_raise(ctx: OperationContext, value: BudgetRaiseInput) -> BudgetView:
    return await _book(ctx).raise_(value.id, by=value.by, to=value.to, cap=value.cap, caller=_by(ctx))


async def budget_show(ctx: OperationContext, value: BudgetIdInput) -> BudgetView:
    return await _book(ctx).get(value.id)


async def budget_list(ctx: OperationContext, value: BudgetListInput) -> BudgetList:
    return BudgetList(budgets=await _book(ctx).list())


SPECS = (
    OperationSpec(
        name="budget.set", description="Create a budget (a cap in tokens and/or cost) or set it again.",
        input_type=BudgetSetInput, output_type=BudgetView, handler=budget_set, trust=OPERATOR,
        audit_kind="budget.write", mutating=True, idempotent=True, timeout=10.0,
    ),
    OperationSpec(
        name="budget.raise", description="Raise a budget's cap; the jobs it paused at the cap go on.",
        input_type=BudgetRaiseInput, output_type=BudgetView, handler=budget_raise, trust=OPERATOR,
        audit_kind="budget.write", mutating=True, idempotent=False, timeout=10.0, operator_mcp=True,
    ),
    OperationSpec(
        name="budget.show", description="A budget: its caps, what was spent and what is held, priced now.",
        input_type=BudgetIdInput, output_type=BudgetView, handler=budget_show, trust=OPERATOR,
        audit_kind="budget.read", mutating=False, idempotent=True, timeout=10.0, operator_mcp=True,
    ),
    OperationSpec(
        name="budget.list", description="Every budget with what it spent and holds.",
        input_type=BudgetListInput, output_type=BudgetList, handler=budget_list, trust=OPERATOR,
        audit_kind="budget.read", mutating=False, idempotent=True, timeout=10.0, operator_mcp=True,
    ),
)
