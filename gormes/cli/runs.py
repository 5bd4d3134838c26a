"""`gormes run` (start a run in this process and wait for it) and
`gormes runs list|show` (read recorded runs, priced with the one pricing table:
gormes/cli/pricing.py), `gormes runs resume` (continue an interrupted run)."""

from __future__ import annotations

import sys
from typing import Any

import click
import msgspec

from gormes.actors.runs.listing import RUN_STATUSES
from gormes.cli.foreground import (
    drive_runs, echo_outcome, exit_code, import_option, start_and_wait, workspace_option,
)
from gormes.cli.jobs import LIST_LIMIT, check_range
from gormes.cli.pricing import pricing_option, pricing_table
from gormes.errors import UserError


def _emit_json(value: Any) -> None:
    click.echo(msgspec.json.encode(value).decode())


@click.command("run")
@click.argument("handler")
@click.option("--prompt", help="The agent's task (input {\"prompt\": TEXT}).")
@click.option("--input", "input_json", metavar="JSON", help="The handler's input as JSON (instead of --prompt).")
@click.option("--system", help="The agent's system prompt.")
@click.option("--model", metavar="SPEC", help="scripted:PATH (a script, not a model) or openai:MODEL.")
@click.option("--tools", metavar="A,B", help="Tool allowlist (default: every prompt-visible tool).")
@click.option("--max-iterations", type=click.IntRange(min=1), help="Model turns before giving up.")
@click.option("--deadline", "deadline_s", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS")
@workspace_option
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.pass_obj
def run(obj: Any, handler: str, prompt: str | None, input_json: str | None, system: str | None,
        model: str | None, tools: str | None, max_iterations: int | None, deadline_s: float | None,
        workspace: str | None, as_json: bool) -> None:
    """Start a run of HANDLER ("agent" for the built-in agent loop) and wait for it.

    The start is audited (operation run.start, as the operator)."""
    if input_json is not None:
        try:
            run_input = msgspec.json.decode(input_json.encode())
        except msgspec.DecodeError as exc:
            raise UserError(f"malformed JSON for --input: {exc}") from None
    elif prompt is not None:
        run_input = {"prompt": prompt}
        if system:
            run_input["system"] = system
    else:
        raise UserError("give the run's input: --prompt TEXT or --input JSON")
    allow = [t.strip() for t in tools.split(",") if t.strip()] if tools is not None else None
    value = {"handler": handler, "input": run_input, "model": model, "tools": allow,
             "max_iterations": max_iterations, "deadline_s": deadline_s}

    def started(run_id: str) -> None:
        if not as_json:
            click.echo(f"run {run_id} started")

    outcome, signals = drive_runs(
        obj.target, workspace, lambda door: start_and_wait(door, "run.start", value, started))
    if as_json:
        _emit_json(outcome)
    else:
        echo_outcome(f"run {outcome.run_id}", outcome)
    sys.exit(exit_code(outcome, signals))


@click.group()
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
    from gormes.cli.quick_read import read_current
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
        return [{**r, "cost": costs.get(r["run_id"])} for r in rows]

    async def main() -> list[dict[str, Any]]:
        async with open_store(obj.target) as store:
            rows = await list_runs(store, **filters)
            return await store.read_sql(lambda conn: priced(conn, rows))

    quick, rows = read_current(obj, projection.name, projection.version,
                               lambda conn: priced(conn, select_runs(conn, **filters)))
    if not quick:
        import trio

        rows = trio.run(main)
    if as_json:
        _emit_json(rows)
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
        _emit_json(view)
    else:
        click.echo("\n".join(format_view(view)))


@runs.command()
@click.argument("run_id", metavar="RUN")
@click.option("--force", is_flag=True,
              help="RUN has no end and its process, which cannot be checked from here (another host or "
              "container), is gone: record it as cut off, then resume it. On its own host a gone "
              "process is seen without it.")
@workspace_option
@import_option
@click.option("--json", "as_json", is_flag=True, help="Print the new run as JSON.")
@click.pass_obj
def resume(obj: Any, run_id: str, force: bool, workspace: str | None, imports: tuple[str, ...],
           as_json: bool) -> None:
    """Continue RUN, an interrupted run (not a job's: the job resumes those), as a new
    run with `resumed_from`: its recorded steps are replayed, not redone, then it goes live.

    The resume is audited (operation run.resume, as the operator); the new run keeps
    RUN's trust class and memory scope."""
    from gormes.cli.replay import load_handlers

    load_handlers(imports)
    def started(new_run_id: str) -> None:
        if not as_json:
            click.echo(f"run {new_run_id} started: resumes run {run_id}")

    resumed, signals = drive_runs(obj.target, workspace, lambda door: start_and_wait(
        door, "run.resume", {"run_id": run_id, "force": force}, started))
    if as_json:
        _emit_json(resumed)
    else:
        echo_outcome(f"run {resumed.run_id} (resumes run {run_id}, {resumed.copied} recorded observations "
                     "replayed)", resumed.outcome)
    sys.exit(exit_code(resumed.outcome, signals))
