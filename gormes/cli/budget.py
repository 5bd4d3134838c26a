"""`gormes budget set|raise|show|list`: caps on what runs may spend (decision 0030).

Each verb is one operator-only budget.* operation run through the audited executor
(gormes/tools/budgets.py), its options derived from the operation's input
(gormes/cli/derive.py): a negative cap or an unknown budget is one `gormes:
error:` line, exit 2, and nothing is written.

    gormes budget set team-a --tokens 200000 --policy pause
    gormes budget set scope:chat:alice --cost 5           # every run of that memory scope
    gormes budget set job:01J... --tokens 50000           # that job's runs and their subagents
    gormes budget raise team-a --by 50000                 # the jobs it paused go on
    gormes budget show team-a --json
"""

from __future__ import annotations

from typing import Any

import click
import msgspec

from gormes.cli.derive import OperatorCall, Shown, operation_command, spec_named
from gormes.providers.pricing import format_cost
from gormes.tools import budgets as budget_ops

json_option = click.option("--json", "as_json", is_flag=True, help="Print the budget as JSON.")


@click.group()
def budget() -> None:
    """Budgets: caps in tokens and/or cost on run trees, jobs and scopes."""


def _cap(spent: Any, held: Any, cap: Any, left: Any, show: Any) -> str:
    if cap is None:
        return f"{show(spent)} spent + {show(held)} held (no cap)"
    return f"{show(spent)} spent + {show(held)} held of {show(cap)} ({show(left)} left)"


def describe(v: Any) -> list[str]:
    lines = [f"budget {v.id}: policy {v.policy}"]
    lines.append("  tokens: " + _cap(v.spent_tokens, v.held_tokens, v.tokens_cap, v.tokens_left, str))
    lines.append("  cost:   " + _cap(v.spent_cost, v.held_cost, v.cost_cap, v.cost_left, format_cost)
                 + f"  [pricing {v.pricing}]")
    lines.append(f"  turns: {v.turns} settled, {v.refused} refused at the cap; "
                 f"{v.overrun_tokens} tokens used beyond what their turns held")
    if v.paused_jobs:
        lines.append(f"  paused jobs (resumed by a raise): {', '.join(v.paused_jobs)}")
    return lines


def _print(value: Any, as_json: bool) -> None:
    if as_json:
        click.echo(msgspec.json.encode(value).decode())
        return
    click.echo("\n".join(describe(value)))


@operation_command(budget, "set", spec_named(budget_ops.SPECS, "budget.set"), arguments=("id",), shown={
    "tokens": Shown(metavar="N"), "cost": Shown(metavar="USD"), "output_estimate": Shown(metavar="N"),
    "bytes_per_token": Shown(metavar="X"), "hold_s": Shown(metavar="SECONDS"),
})
@json_option
def set_(call: OperatorCall, as_json: bool) -> None:
    """Create budget ID, or set its caps and policy again."""
    _print(call.run(), as_json)


@operation_command(budget, "raise", spec_named(budget_ops.SPECS, "budget.raise"), arguments=("id",), shown={
    "by": Shown(metavar="AMOUNT"), "to": Shown(metavar="AMOUNT"),
})
@json_option
def raise_(call: OperatorCall, as_json: bool) -> None:
    """Raise budget ID's cap (--by or --to); the jobs it paused at its cap go on."""
    _print(call.run(), as_json)


@operation_command(budget, "show", spec_named(budget_ops.SPECS, "budget.show"), arguments=("id",))
@json_option
def show(call: OperatorCall, as_json: bool) -> None:
    """Budget ID: caps, spent, held by turns in flight, priced now."""
    _print(call.run(), as_json)


@operation_command(budget, "list", spec_named(budget_ops.SPECS, "budget.list"))
@click.option("--json", "as_json", is_flag=True, help="One JSON object {budgets: [...]}.")
def list_(call: OperatorCall, as_json: bool) -> None:
    """Every budget with what it spent and holds."""
    listed = call.run()
    if as_json:
        click.echo(msgspec.json.encode(listed).decode())
        return
    if not listed.budgets:
        click.echo("no budgets")
        return
    from gormes.cli.output import print_rows_table

    print_rows_table(
        ("ID", "POLICY", "TOKENS", "TOKEN CAP", "COST", "COST CAP", "TURNS", "REFUSED", "PAUSED JOBS"),
        [(v.id, v.policy, str(v.spent_tokens + v.held_tokens), "-" if v.tokens_cap is None else str(v.tokens_cap),
          format_cost(v.spent_cost), "-" if v.cost_cap is None else format_cost(v.cost_cap), str(v.turns),
          str(v.refused), str(len(v.paused_jobs))) for v in listed.budgets],
    )
