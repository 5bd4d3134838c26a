"""`gormes redact (--stream S | --position N) --reason TEXT [--json]`: erasure.

Replaces the data of a stream's events, or of one event, by tombstones (who,
when, why, a sha256 of what was removed), keeping their positions, versions and
types; the projections that held the text fold again without it. It is the
`log.redact` operation (gormes/tools/log_redact.py), run through the audited
executor as the operator; decision 0026 and docs/security.md say what it
guarantees and what it cannot reach (backups, archive segments, exports made
before).
"""

from __future__ import annotations

import click

from gormes.cli.params import POSITION


@click.command()
@click.option("--stream", default=None, metavar="STREAM", help="Redact every event of STREAM.")
@click.option("--position", type=POSITION, default=None, metavar="N", help="Redact the event at position N.")
@click.option("--reason", required=True, metavar="TEXT", help="Why (kept in each tombstone).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def redact(obj, stream: str | None, position: int | None, reason: str, as_json: bool) -> None:
    """Erase the data of a stream's events or of one event (operator only, audited)."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import msgspec

    from gormes.cli.ops import operator_session
    from gormes.errors import UserError
    from gormes.events.catalog import load_all
    from gormes.tools.log_redact import RedactInput

    if (stream is None) == (position is None):
        raise UserError("name exactly one of --stream or --position")
    if not reason.strip():
        raise UserError("--reason must say why")
    load_all()
    value = RedactInput(stream=stream, position=position, reason=reason)

    async def work(door):
        return await door.call("log.redact", value)

    result = operator_session(obj, work, jobs=False)
    if as_json:
        click.echo(msgspec.json.encode(result).decode())
        return
    where = f" in {', '.join(result.streams)}" if result.streams else ""
    click.echo(f"redacted {result.redacted} event(s){where}")
    if result.projections:
        click.echo(f"projections folded again: {', '.join(result.projections)}")
    if not result.wal_truncated:
        click.echo("gormes: warning: a reader kept the WAL from being truncated; "
                   "old pages stay in it until the next checkpoint")
