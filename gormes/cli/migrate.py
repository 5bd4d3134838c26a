"""`gormes migrate --from sqlite:PATH --to postgresql://...`: move a log to PostgreSQL."""

from __future__ import annotations

import sys

import click

from gormes.cli.live_work import live_work_option


@click.command()
@click.option("--from", "source", required=True, metavar="sqlite:PATH",
              help="The SQLite database to copy (read only; `sqlite:` may be left out).")
@click.option("--to", "target", required=True, metavar="postgresql://...",
              help="The PostgreSQL database (empty, or holding an exact prefix of the source).")
@click.option("--batch", type=click.IntRange(min=1), default=5000, show_default=True,
              metavar="N", help="Events per transaction on the target.")
@live_work_option("Continue into a non-empty target even if what is copied brings live work")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as one JSON object.")
def migrate(source: str, target: str, batch: int, live_work: bool, as_json: bool) -> None:
    """Copy the event log from SQLite to PostgreSQL with positions preserved.

    The copy goes in batches (a progress bar on a terminal) and is then verified:
    the event counts and a SHA-256 over (position, stream, version, type,
    type_version, data) in position order, computed on each side, must agree. A
    target that already holds events is refused unless they are an exact prefix
    of the source, in which case the copy continues after them, refusing live
    work in what it adds unless --live-work (an empty target takes a whole log,
    live work and all). Projections are
    not copied: they rebuild from the log. The approvals index is built on the
    target at the end of the copy.
    """
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import msgspec

    from gormes.errors import UserError
    from gormes.events.open import is_postgres_url, store_target
    from gormes.migrate import Migration

    # Each read as --db is (decision 0089): a mistyped URL or a keyword string is refused.
    source = store_target(source, "--from")
    target = store_target(target, "--to")
    if is_postgres_url(source):
        raise UserError("--from must be an SQLite database (sqlite:PATH), not a PostgreSQL URL")
    if not is_postgres_url(target):
        raise UserError(f"--to must be a postgresql:// URL, not the SQLite path {target!r}")
    with Migration.open(source, target, live_work=live_work) as migration:
        show_progress = not as_json and sys.stderr.isatty() and migration.remaining > 0
        if show_progress:
            with click.progressbar(length=migration.remaining, label="copying events",
                                   file=sys.stderr) as bar:
                migration.copy(progress=bar.update, batch=batch)
        else:
            migration.copy(batch=batch)
        report = migration.verify()
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
        return
    if report.copied:
        click.echo(f"copied {report.copied} events from {report.source} to {report.target}"
                   + (f" (after {report.already_present} already there)"
                      if report.already_present else ""))
    else:
        click.echo(f"nothing to copy: {report.target} already holds all "
                   f"{report.events} events of {report.source}")
    click.echo(f"verified: {report.events} events on both sides, positions 1..{report.last_position}, "
               f"sha256 {report.sha256}")
