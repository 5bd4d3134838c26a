"""`gormes projections status|rebuild [--check]`.

`rebuild` is the operator-only `projections.rebuild`, run through the audited
executor (gormes/tools/projections_admin.py; decision 0019), its NAMES derived
from the operation's input (gormes/cli/derive.py). `status` and `rebuild
--check` are reads: the live database is not written, and they are not audited.
"""

from __future__ import annotations

import click

from gormes.cli.derive import OperatorCall, Shown, operation_command, spec_named
from gormes.tools import projections_admin


@click.group()
def projections() -> None:
    """Show, rebuild or check the projections (read models) of the log."""


@projections.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_obj
def status(obj, as_json: bool) -> None:
    """Each projection's version, tracked position, lag and failed batches."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.projections import registry
    from gormes.projections.bookkeeping import read_status

    if obj.url is not None:
        # Lazy for start-up time: loaded when the command runs, not for its --help.
        import trio

        from gormes.events.open import open_store
        from gormes.projections.schema import schema_of

        known = [p for p in registry.all_projections()
                 if schema_of(p) is not None or p.name == "ledger"]
        skipped = [p.name for p in registry.all_projections() if p not in known]

        async def read() -> list:
            async with open_store(obj.url, readonly=True) as store:
                return await store.read_sql(
                    lambda conn: read_status(conn, [(p.name, p.version) for p in known])
                )

        statuses = trio.run(read)
    else:
        # Lazy for start-up time: loaded when the command runs, not for its --help.
        from gormes.events.sqlite_log import SQLiteLog

        skipped = []
        log = SQLiteLog(obj.db, readonly=True)
        try:
            statuses = read_status(
                log.conn, [(p.name, p.version) for p in registry.all_projections()]
            )
        finally:
            log.close()
    if as_json:
        _echo_json(statuses)
        return
    rows = [
        (s.name, str(s.version), str(s.position), str(s.head), str(s.lag), str(s.failures), s.state)
        for s in statuses
    ]
    _echo_table(("NAME", "VERSION", "POSITION", "HEAD", "LAG", "FAILURES", "STATE"), rows)
    for s in statuses:
        if s.last_error:
            click.echo(f"{s.name}: last failure: {s.last_error}")
    for name in skipped:
        click.echo(f"{name}: SQLite only, not on PostgreSQL")


@operation_command(projections, "rebuild", spec_named(projections_admin.SPECS, "projections.rebuild"),
                   arguments=("names",), shown={"names": Shown(metavar="[NAMES]...")})
@click.option(
    "--check",
    is_flag=True,
    help="Rebuild into a scratch copy (a file; on PostgreSQL a schema, dropped afterwards) and "
    "report any difference from the live tables (exit 1 if there is one); the live database "
    "is not written.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def rebuild(call: OperatorCall, check: bool, as_json: bool) -> None:
    """Rebuild projections (all, or those NAMES) from the start of the log."""
    if not check:
        with _progress() as bar:
            done = call.run(jobs=False, progress=bar.report)  # no job queue: the rebuild sets up the ledger itself
        for name in done.skipped:
            click.echo(f"{name}: SQLite only, skipped on PostgreSQL", err=True)
        _report_rebuilt(done.rebuilt, as_json)
        return
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import sys

    import trio

    from gormes.projections import maintenance, registry

    names = call.value.names
    selected = registry.select(names)
    obj = call.obj
    if obj.url is not None:
        selected = _on_postgres(selected, explicit=bool(names))
    with _progress() as bar:
        if obj.url is not None:
            results = trio.run(maintenance.check_postgres, obj.url, selected, bar.for_projection)
        else:
            results = trio.run(maintenance.check, obj.target, selected, bar.for_projection)
    _report_check(results, as_json)
    if any(r.differs for r in results):
        # Not ctx.exit(1): main() runs click with standalone_mode=False, which
        # turns click's Exit into a return value that main() does not pass on.
        sys.exit(1)


def _on_postgres(selected: list, explicit: bool) -> list:
    """The projections `--check` compares on PostgreSQL; one named that does not
    run there is an error, as it is for the rebuild."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.projections.maintenance import on_postgres

    portable, others = on_postgres(selected, named=explicit)
    for name in others:
        click.echo(f"{name}: SQLite only, skipped on PostgreSQL", err=True)
    return portable


def _report_rebuilt(results: list, as_json: bool) -> None:
    if as_json:
        _echo_json(results)
        return
    for r in results:
        click.echo(f"{r.name}: rebuilt (version {r.version}) up to position {r.position}")


def _report_check(results: list, as_json: bool) -> None:
    if as_json:
        _echo_json(results)
        return
    for r in results:
        if r.state == "not built":
            click.echo(f"{r.name}: not built yet, nothing to compare")
        elif r.differs:
            click.echo(f"{r.name}: DIFFERS from a rebuild at position {r.position}")
            for difference in r.differences:
                click.echo(f"  {difference}")
        else:
            click.echo(f"{r.name}: identical to a rebuild at position {r.position}")


def _echo_json(items: list) -> None:
    import msgspec

    click.echo(msgspec.json.encode(items).decode())


def _echo_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


class _progress:
    """Progress of each projection folded: a rich bar on stderr when it is a
    terminal, nothing otherwise. `report(name, position, head)` is the operation's
    progress (OperationContext.progress); `for_projection` gives the checks'
    per-projection callbacks."""

    def __enter__(self):
        import sys

        self._bar = None
        self._tasks: dict[str, object] = {}
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress

            self._bar = Progress(console=Console(stderr=True), transient=True)
            self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def report(self, name: str, position: int, head: int) -> None:
        if self._bar is None:
            return
        task = self._tasks.get(name)
        if task is None:
            task = self._tasks[name] = self._bar.add_task(name, total=None)
        self._bar.update(task, completed=position, total=max(head, 1))

    def for_projection(self, projection):
        return lambda position, head: self.report(projection.name, position, head)
