"""`gormes append STREAM TYPE --data JSON`: append one typed event.

The CLI refuses text that is not JSON before the database is opened; the rules
(no audit records, no unknown fields, the nesting limit, the type's schema, no
live work unless --live-work) are the `events.append` operation's
(gormes/tools/log_admin.py), run through the audited executor as the operator: a
write or a refusal is one audit event.
"""

from __future__ import annotations

import sys

import click

from gormes.cli.live_work import live_work_option

from gormes.cli.params import POSITION


@click.command()
@click.argument("stream")
@click.argument("type_", metavar="TYPE")
@click.option("--data", default="{}", metavar="JSON", show_default=True,
              help="The event's fields as a JSON object; '-' reads it from stdin.")
@click.option("--expected-version", type=POSITION, default=None, metavar="N",
              help="Fail (writing nothing) unless STREAM is at version N; 0 = a new stream.")
@live_work_option("Append it even if it brings live work")
@click.option("--json", "as_json", is_flag=True,
              help="Print the appended event as one JSON line (the shape of `gormes tail --json`).")
@click.pass_obj
def append(obj, stream: str, type_: str, data: str, expected_version: int | None,
           live_work: bool, as_json: bool) -> None:
    """Append one event of TYPE to STREAM (see `gormes types` for the types)."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.cli import output
    from gormes.cli.ops import operator_session
    from gormes.errors import UserError
    from gormes.events import jsonl
    from gormes.events.catalog import load_all
    from gormes.tools.log_admin import EventAppendInput

    if not stream:
        raise UserError("STREAM must not be empty")
    if data == "-":
        data = sys.stdin.read()
    check_well_formed(data, type_)
    load_all()
    value = EventAppendInput(stream=stream, type=type_, data=data, expected_version=expected_version,
                             live_work=live_work)

    async def work(door):
        appended = await door.call("events.append", value)
        recorded = await door.store.read_with(
            lambda log: jsonl.select(log, appended.position - 1, limit=1)) if as_json else []
        return appended, recorded

    appended, recorded = operator_session(obj, work, jobs=False)
    if as_json:
        output.write_json_lines(recorded)
    else:
        click.echo(f"appended {type_} to {stream}: position {appended.position}, "
                   f"version {appended.version}")


def check_well_formed(data: str, type_: str) -> None:
    """Refuse text that is not JSON before the database is opened. Text nested
    too deep is left to events.append, which refuses it unread (and audits it)."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import msgspec

    from gormes.events.json_nesting import nesting_depth_over
    from gormes.errors import UserError

    raw = data.encode("utf-8", "surrogateescape")
    if nesting_depth_over(raw):
        return
    try:
        msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise UserError(f"malformed JSON for {type_!r}: {exc}") from None
