"""`gormes append STREAM TYPE --data JSON`: append one typed event.

The data is parsed strictly by the event type's schema before the database is
opened, so malformed JSON, JSON nested too deep, an unknown type, wrong or
unknown fields write nothing. Audit records are refused: only the operation
executor writes them (each is chained to the one before, gormes/audit_chain.py).
"""

from __future__ import annotations

import sys

import click

from gormes.cli.params import POSITION


@click.command()
@click.argument("stream")
@click.argument("type_", metavar="TYPE")
@click.option("--data", default="{}", metavar="JSON", show_default=True,
              help="The event's fields as a JSON object; '-' reads it from stdin.")
@click.option("--expected-version", type=POSITION, default=None, metavar="N",
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
    from gormes.events.sqlite_log import SQLiteLog

    if not stream:
        raise UserError("STREAM must not be empty")
    if data == "-":
        data = sys.stdin.read()
    load_all()
    event = parse_data(type_, stream, data)
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


def parse_data(type_: str, stream: str, data: str):
    """The event `--data` describes, or one line saying what is wrong with it."""
    import msgspec

    from gormes.cli.json_input import check_nesting
    from gormes.errors import UserError
    from gormes.events.audit import AUDIT_STREAM_PREFIX
    from gormes.events.codec import default_codec

    cls = default_codec.class_for(type_)
    if cls is None:
        return default_codec.parse(type_, data)  # says the type is unknown, naming the known ones
    if stream.startswith(AUDIT_STREAM_PREFIX) or (
            cls.__struct_config__.tag.startswith("audit.")):
        raise UserError("audit records are written only by the operation executor; "
                        f"`append` refuses type {type_!r} on stream {stream!r}")
    check_nesting(data, "--data")
    try:
        fields = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise UserError(f"malformed JSON for {type_!r}: {exc}") from None
    event = default_codec.parse(type_, fields)  # wrong and missing fields are named first
    known = {f.encode_name for f in msgspec.structs.fields(cls)} | {"type"}
    unknown = sorted(set(fields) - known)  # parse saw to it that `fields` is an object
    if unknown:
        raise UserError(f"unknown field(s) for {type_!r}: {', '.join(unknown)} "
                        "(see `gormes types`); nothing written")
    return event
