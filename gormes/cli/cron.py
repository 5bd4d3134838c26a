"""`gormes cron add|list|remove|pause|resume`: schedules the daemon fires.

Expressions are five-field cron in UTC (or @hourly, @daily, ...). The daemon
enqueues each fire once, as trust class `system`; a fire missed while no daemon
ran is made up once, for the most recent missed time only.

add, pause, resume and remove run the operator-only cron.* operations through
the audited executor (gormes/tools/cron.py; decision 0019); list reads the
`schedules` projection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import click


def _run(db: Any, work: Callable[[Any], Coroutine[Any, Any, Any]]) -> Any:
    import trio

    from gormes.actors.cron.scheduler import CronBook
    from gormes.events.open import open_store

    async def main() -> Any:
        async with open_store(db) as store:
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
    from gormes.actors.cron.rules import next_due

    return next_due(state, int(time.time() * 1000))


@click.group()
def cron() -> None:
    """Schedules that submit jobs on cron expressions (UTC), fired by `gormes daemon`."""


@cron.command()
@click.argument("name")
@click.option("--schedule", required=True, metavar="CRON",
              help='Five fields, UTC: "*/15 * * * *"; or @hourly, @daily, @weekly, @monthly, @yearly.')
@click.option("--job", "job_name", required=True, metavar="JOBNAME", help="The job handler's name.")
@click.option("--data", metavar="JSON", help="The data each job gets (JSON).")
@click.option("--queue", default="default", show_default=True, metavar="Q")
@json_option
@click.pass_obj
def add(obj: Any, name: str, schedule: str, job_name: str, data: str | None, queue: str, as_json: bool) -> None:
    """Add schedule NAME."""
    import msgspec

    from gormes.actors.cron.rules import InvalidSchedule, parse_expression, validate_name

    validate_name(name)
    parse_expression(schedule)  # before the database is touched
    value = None
    if data is not None:
        try:
            value = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise InvalidSchedule(f"--data is not JSON: {exc}") from None
    from gormes.cli.ops import operator_call

    added = operator_call(obj, "cron.add", {"name": name, "schedule": schedule, "job": job_name,
                                           "data": value, "queue": queue})
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
    states = _run(obj.target, lambda book: book.list())
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


def _simple(verb: str, past: str, doc: str) -> click.Command:
    @click.argument("name")
    @json_option
    @click.pass_obj
    def command(obj: Any, name: str, as_json: bool) -> None:
        from gormes.cli.ops import operator_call

        state = operator_call(obj, f"cron.{verb}", {"name": name})
        if as_json:
            _echo_json(state)
        else:
            click.echo(f"{past} {state.name} (now {state.status})")

    command.__doc__ = doc
    return cron.command(name=verb)(command)


_simple("pause", "paused", "Pause schedule NAME: nothing fires until it is resumed.")
_simple("resume", "resumed", "Resume schedule NAME; fires that fell due while paused are skipped.")
_simple("remove", "removed", "Remove schedule NAME (its history stays in the log).")
