"""`gormes runs list|show`: read recorded runs, priced with the one pricing table
(gormes/cli/pricing.py).

`gormes run` (start a run in this process and wait for it), `gormes runs send`
(a message to a running run) and `gormes runs resume` (continue an interrupted
run) are each one run operation, their options derived from its input type; they
live in gormes/cli/run_operations.py, imported only when one of them is asked for
(gormes/cli/lazy_group.py): `runs list` reads a current file without the executor.
"""

from __future__ import annotations

from typing import Any

import click
import msgspec

from gormes.actors.runs.listing import RUN_STATUSES
from gormes.cli.jobs import LIST_LIMIT, check_range
from gormes.cli.lazy_group import LazyCommands
from gormes.cli.pricing import pricing_option, pricing_table


def emit_json(value: Any) -> None:
    click.echo(msgspec.json.encode(value).decode())


# The commands that are one operation each (gormes/cli/run_operations.py).
OPERATIONS = ("send", "resume")


@click.group(cls=LazyCommands, later={name: "gormes.cli.run_operations" for name in OPERATIONS})
def runs() -> None:
    """List and inspect recorded runs."""


@runs.command("list")
@click.option("--status", type=click.Choice(RUN_STATUSES), help="Only runs in this status.")
@click.option("--job", "job_id", metavar="ID", help="Only the runs of this job (its attempts' and their subagents').")
@click.option("--handler", metavar="NAME", help="Only runs of this handler.")
@click.option("--top-level", is_flag=True, help="No subagents: only runs without a parent.")
@click.option("--limit", type=int, default=100, show_default=True, help="%d..%d." % LIST_LIMIT)
@pricing_option
@click.option("--json", "as_json", is_flag=True, help="One JSON array of run rows, each with its cost.")
@click.pass_obj
def list_(obj: Any, status: str | None, job_id: str | None, handler: str | None, top_level: bool,
          limit: int, pricing: str | None, as_json: bool) -> None:
    """Runs, newest first (from the `runs` projection, caught up first).

    A run with no end (running or suspended) also shows whether its process is
    alive: "gone" means it was cut off (killed) with no end recorded."""

    # lazy, each: start-up time (`gormes run` and the other commands need none of these)
    from gormes.actors.runs.listing import list_runs, select_runs  # lazy
    from gormes.projections.quick_read import read_current
    from gormes.events.open import open_store  # lazy
    from gormes.projections.runs import runs as projection  # lazy

    check_range("--limit", limit, *LIST_LIMIT)
    table = pricing_table(pricing) if as_json else None  # the lines for people show no cost
    filters = {"status": status, "job_id": job_id, "handler": handler, "top_level": top_level, "limit": limit}

    def priced(conn: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if table is None:
            return rows
        from gormes.actors.runs.costs import run_costs  # lazy: only the JSON rows have a cost

        costs = run_costs(conn, [r["run_id"] for r in rows], table)
        return [{**r, "cost": costs.get(r["run_id"]), "pricing": table.version} for r in rows]

    async def main() -> list[dict[str, Any]]:
        async with open_store(obj.target, create=False) as store:
            rows = await list_runs(store, **filters)
            return await store.read_sql(lambda conn: priced(conn, rows))

    quick, rows = read_current(None if obj.url is not None else obj.db, projection.name, projection.version,
                               lambda conn: priced(conn, select_runs(conn, **filters)))
    if not quick:
        import trio

        rows = trio.run(main)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no runs")
        return
    for r in rows:
        parent = f"  parent {r['parent_run_id']}" if r["parent_run_id"] else ""
        error = f"  {r['error']}" if r["error"] else ""
        gone = f"  its process {r['pid']} on {r['host']} is gone: cut off" if r["process"] == "gone" else ""
        click.echo(f"{r['run_id']}  {r['status']:<10} {r['handler']:<12} depth {r['depth']}  "
                   f"turns {r['iterations']}  tokens {r['tokens_input']}/{r['tokens_output']}{parent}{error}{gone}")


@runs.command()
@click.argument("run_id")
@click.option("--tree", is_flag=True, help="Show the children's runs too, as a tree.")
@pricing_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def show(obj: Any, run_id: str, tree: bool, pricing: str | None, as_json: bool) -> None:
    """A run's timeline: model turns, tool calls, inbox, children, tokens and cost."""
    table = pricing_table(pricing)
    import trio

    # lazy, each: start-up time of the other commands
    from gormes.actors.runs.timeline import format_view, run_view  # lazy
    from gormes.events.open import open_store  # lazy

    async def main() -> dict[str, Any]:
        async with open_store(obj.target, readonly=True) as store:
            return await run_view(store, run_id, tree=tree, table=table)

    view = trio.run(main)
    if as_json:
        emit_json(view)
    else:
        click.echo("\n".join(format_view(view)))
