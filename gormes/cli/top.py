"""`gormes top [--once] [--json]`: the workforce at a glance.

Without options it is live (a terminal is required; see gormes/dashboard/app.py).
`--once` prints one snapshot and exits; `--once --json` prints it as one JSON
object, for scripts and tests. Both run on an SQLite file or a PostgreSQL URL.
Costs are priced with the one pricing table (`--pricing`, gormes/cli/pricing.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gormes.cli.pricing import pricing_option, pricing_table
from gormes.errors import UserError


def snapshot_once(target: Path | str, pricing: Any) -> Any:
    import trio

    # lazy, each: start-up time (`gormes --help` loads this module's command)
    from gormes.dashboard.app import open_views, read_view  # lazy
    from gormes.dashboard.control import ControlWatch  # lazy
    from gormes.events.open import open_store  # lazy

    async def main() -> Any:
        async with open_store(target) as store:
            await open_views(store)
            snapshot = await read_view(store, pricing=pricing, watch=ControlWatch(store))
        return snapshot.with_selected(snapshot.jobs[0].id if snapshot.jobs else None)

    return trio.run(main)


@click.command("top")
@click.option("--once", is_flag=True, help="Print one snapshot and exit.")
@click.option("--json", "as_json", is_flag=True, help="With --once: the snapshot as one JSON object.")
@click.option("--fps", type=click.FloatRange(min=0.5, max=30), default=10.0, show_default=True,
              help="Most redraws per second (live view).")
@pricing_option
@click.pass_obj
def top(obj: Any, once: bool, as_json: bool, fps: float, pricing: str | None) -> None:
    """A live view of jobs, runs, workers and the governor; keys steer the selected job."""
    from gormes.events.open import require_database  # lazy

    require_database(obj.target)
    if as_json and not once:
        raise UserError("--json needs --once (the live view is for people)")
    table = pricing_table(pricing)
    if once:
        snapshot = snapshot_once(obj.target, table)
        if as_json:
            import msgspec

            click.echo(msgspec.json.encode(snapshot).decode())
        else:
            from rich.console import Console

            from gormes.dashboard.render import render_dashboard  # lazy: rich, for --once only

            Console().print(render_dashboard(snapshot))
        return
    import trio

    from gormes.dashboard.app import run_live  # lazy: start-up time

    trio.run(lambda: run_live(obj.target, pricing=table, fps=fps))
