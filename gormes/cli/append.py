"""`gormes append STREAM TYPE --data JSON`: append one typed event.

The data is parsed strictly by the event type's schema before the database is
opened, so malformed JSON, an unknown type or wrong fields write nothing.
"""

from __future__ import annotations

import sys

import click


@click.command()
@click.argument("stream")
@click.argument("type_", metavar="TYPE")
@click.option("--data", default="{}", metavar="JSON", show_default=True,
              help="The event's fields as a JSON object; '-' reads it from stdin.")
@click.option("--expected-version", type=click.IntRange(min=0), default=None, metavar="N",
              help="Fail (writing nothing) unless STREAM is at version N; 0 = a new stream.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the appended event as one JSON line (the shape of `gormes tail --json`).")
@click.pass_obj
def append(obj, stream: str, type_: str, data: str, expected_version: int | None,
           as_json: bool) -> None:
    """Append one event of TYPE to STREAM (see `gormes types` for the types)."""
    from gormes.cli import output
    from gormes.errors import UserError
    from gormes.events import jsonl
    from gormes.events.catalog import load_all
    from gormes.events.codec import default_codec
    from gormes.events.sqlite_log import SQLiteLog

    if not stream:
        raise UserError("STREAM must not be empty")
    if data == "-":
        data = sys.stdin.read()
    load_all()
    event = default_codec.parse(type_, data)
    from gormes.cli.postgres_log import append_one, database_url

    url = database_url()
    if url is not None:
        result, recorded = append_one(url, stream, event, expected_version)
        if as_json:
            output.write_json_lines(recorded)
        else:
            click.echo(
                f"appended {type_} to {stream}: position {result.first_position}, "
                f"version {result.version}"
            )
        return
    log = SQLiteLog(obj.db)
    try:
        result = log.append_now(stream, [event], expected_version)
        if as_json:
            output.write_json_lines(
                jsonl.select(log, result.first_position - 1, limit=1)
            )
        else:
            click.echo(
                f"appended {type_} to {stream}: position {result.first_position}, "
                f"version {result.version}"
            )
    finally:
        log.close()
