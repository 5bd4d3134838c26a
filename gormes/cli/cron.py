"""`gormes cron add|list|remove|pause|resume`: schedules the daemon fires.

Expressions are five-field cron in UTC (or @hourly, @daily, ...). The daemon
enqueues each fire once, as trust class `system`; a fire missed while no daemon
ran is made up once, for the most recent missed time only.

add, pause, resume and remove are each one operator-only cron.* operation, run
through the audited executor (gormes/tools/cron.py; decision 0019), their options
derived from its input (gormes/cli/derive.py); list reads the `schedules` projection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import click
import trio

from gormes.actors.cron.rules import next_due
from gormes.actors.cron.scheduler import CronBook
from gormes.cli.derive import OperatorCall, Shown, operation_command, spec_named
from gormes.cli.imports import import_option
from gormes.events.open import open_store
from gormes.tools import cron as cron_ops
from gormes.tools.imports import load_imports


def _read(db: Any, work: Callable[[Any], Coroutine[Any, Any, Any]]) -> Any:
    """`work(book)` on the store, which must exist: `cron list` creates no database."""
    async def main() -> Any:
        async with open_store(db, create=False) as store:
            return await work(CronBook(store))

    return trio.run(main)


json_option = click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON (next_fire in ms).")


def _echo_json(value: Any) -> None:
    import msgspec

    click.echo(msgspec.json.encode(value).decode())


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _next_fire(state: Any) -> int | None:
    return next_due(state, int(time.time() * 1000))


@click.group()
def cron() -> None:
    """Schedules that submit jobs on cron expressions (UTC), fired by `gormes daemon`."""


@operation_command(cron, "add", spec_named(cron_ops.SPECS, "cron.add"), arguments=("name",), shown={
    "schedule": Shown(metavar="CRON"), "job": Shown(metavar="JOBNAME"), "data": Shown(metavar="JSON"),
    "queue": Shown(metavar="Q"),
})
@json_option
@import_option
def add(call: OperatorCall, as_json: bool, imports: tuple[str, ...]) -> None:
    """Add schedule NAME.

    An `agent` job's data is checked as `jobs submit` checks it (decision 0090):
    --import the handlers and operations the daemon imports."""
    load_imports(imports)
    added = call.run()
    if as_json:
        _echo_json(added)
        return
    click.echo(f"added {added.name}: {added.schedule} -> {added.job} on queue {added.queue}; "
               f"next fire {_iso(added.next_fire)}")


@cron.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of schedules.")
@click.pass_obj
def list_(obj: Any, as_json: bool) -> None:
    """Every schedule with its next and last fire time."""
    states = _read(obj.target, lambda book: book.list())
    rows = [
        {
            "name": s.name, "schedule": s.schedule, "job": s.job, "data": s.data,
            "queue": s.queue, "status": s.status, "next_fire": _iso(_next_fire(s)),
            "last_fire": _iso(s.last_fire_at), "last_job_id": s.last_job_id, "fires": s.fires,
            "created_at": _iso(s.created_at),
        }
        for s in states
    ]
    if as_json:
        import msgspec

        click.echo(msgspec.json.encode(rows).decode())
        return
    if not rows:
        click.echo("no schedules")
        return
    from gormes.cli.output import print_rows_table

    print_rows_table(
        ("NAME", "SCHEDULE", "JOB", "QUEUE", "STATUS", "NEXT FIRE", "LAST FIRE", "FIRES"),
        [(r["name"], r["schedule"], r["job"], r["queue"], r["status"], r["next_fire"] or "-",
          r["last_fire"] or "-", str(r["fires"])) for r in rows],
    )


def _steer(verb: str, past: str, doc: str) -> None:
    @json_option
    def command(call: OperatorCall, as_json: bool) -> None:
        state = call.run()
        if as_json:
            _echo_json(state)
        else:
            click.echo(f"{past} {state.name} (now {state.status})")

    command.__doc__ = doc
    operation_command(cron, verb, spec_named(cron_ops.SPECS, f"cron.{verb}"), arguments=("name",))(command)


_steer("pause", "paused", "Pause schedule NAME: nothing fires until it is resumed.")
_steer("resume", "resumed", "Resume schedule NAME; fires that fell due while paused are skipped.")
_steer("remove", "removed", "Remove schedule NAME (its history stays in the log).")
