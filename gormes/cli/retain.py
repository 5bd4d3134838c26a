"""`gormes retain --older-than DURATION [--archive DIR] [--dry-run] [--json]`: retention.

Archives the job, run and cron streams that ended before the horizon (now minus
DURATION) to a gzip JSONL segment with a manifest, then deletes them from the
log in one transaction; the projections that folded them fold again without
them and, on SQLite, the freed pages go back to the filesystem. It is the
`log.retain` operation (gormes/tools/retention.py), run through the audited
executor as the operator; docs/retention.md and decision 0029 say what is
chosen, what is not, and how a segment comes back (`gormes import SEGMENT`,
`gormes replay RUN --file SEGMENT`).
"""

from __future__ import annotations

import click

from gormes.cli.derive import DURATION_MS


@click.command()
@click.option("--older-than", "older_than_ms", type=DURATION_MS, required=True, metavar="DURATION",
              help="The horizon's age: 30d, 12h, 2w (a bare number is seconds).")
@click.option("--archive", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Where the segments go (SQLite default: beside the file, <name>-archive; "
              "PostgreSQL: required).")
@click.option("--dry-run", is_flag=True, help="Say what would be archived; write nothing but the audit record.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def retain(obj, older_than_ms: int, archive: str | None, dry_run: bool, as_json: bool) -> None:
    """Archive and delete the streams that ended before a horizon (operator only, audited)."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import msgspec

    from gormes.cli.ops import operator_session
    from gormes.events.catalog import load_all
    from gormes.tools.retention import RetainInput

    load_all()
    value = RetainInput(older_than_s=older_than_ms / 1000, dry_run=dry_run, archive=archive)

    async def work(door):
        return await door.call("log.retain", value)

    result = operator_session(obj, work)
    if as_json:
        click.echo(msgspec.json.encode(result).decode())
        return
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(result.kinds.items())) or "none"
    what = "would archive" if result.dry_run else "archived"
    where = "" if result.first_position is None else f" (positions {result.first_position}..{result.last_position})"
    click.echo(f"{what} {result.streams} stream(s): {kinds}; {result.events} event(s){where}")
    if result.segment:
        click.echo(f"segment: {result.segment} ({result.segment_bytes} bytes, sha256 {result.sha256})")
        click.echo(f"manifest: {result.manifest}")
    if result.projections:
        click.echo(f"projections folded again: {', '.join(result.projections)}")
    before, after = result.before, result.after
    if not result.dry_run and result.segment:
        click.echo(f"database: {before.file_bytes} -> {after.file_bytes} bytes")
        if after.auto_vacuum == "none" and after.free_bytes:
            click.echo(f"gormes: warning: {after.free_bytes} bytes are free pages the file keeps "
                       "(made without auto_vacuum); see docs/retention.md to convert it once")
