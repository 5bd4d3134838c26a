"""`gormes audit export [--since T] [--until T] [--kind K]... [--out FILE]`,
`gormes audit verify [--since DAY] [--json]` (the hash chains, gormes/events/audit_chain.py)
and `gormes audit unfinished [--since T] [--json]` (gormes/audit_unfinished.py)."""

from __future__ import annotations

import sys
from typing import Any

import click


@click.group()
def audit() -> None:
    """The audit trail: one event per operation call and trust decision."""


@audit.command()
@click.option("--since", metavar="T", help="From this time on (ISO-8601, UTC if no offset; or an age: 30m, 2h, 7d).")
@click.option("--until", metavar="T", help="Before this time (same forms as --since).")
@click.option("--kind", "kinds", multiple=True, metavar="K", help="Only this audit kind (repeatable), e.g. fs.read.")
@click.option("--out", "out_path", metavar="FILE", type=click.Path(dir_okay=False),
              help="Write to FILE instead of standard output.")
@click.pass_obj
def export(obj: Any, since: str | None, until: str | None, kinds: tuple[str, ...], out_path: str | None) -> None:
    """Write audit events as JSON lines (schema: docs/audit.md), from an SQLite
    file or a PostgreSQL schema (read in one READ ONLY transaction)."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import time

    from gormes.audit_export import AuditExport, make_filter, read_audit, write_lines
    from gormes.events.catalog import load_all
    from gormes.events.codec import default_codec
    from gormes.out_file import replacing

    load_all()
    query = make_filter(since, until, kinds, time.time())
    conn = _open(obj)
    result = AuditExport()
    try:
        records = read_audit(conn, query, default_codec, result)
        if out_path is None:
            write_lines(records, sys.stdout.buffer, result)
        else:
            with replacing(out_path) as out:  # a new or regular file only, replaced whole
                write_lines(records, out, result)
    finally:
        conn.close()
    if result.unreadable:
        click.echo(
            f"gormes: warning: left out {result.unreadable} audit event(s) this gormes cannot read "
            "(written by a newer version)", err=True,
        )
    if out_path is not None:
        click.echo(f"wrote {result.written} audit record(s) to {out_path}", err=True)


@audit.command()
@click.option("--since", metavar="DAY", help="Only the days from DAY (YYYY-MM-DD, UTC) on.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per day, with its head digest.")
@click.pass_obj
def verify(obj: Any, since: str | None, as_json: bool) -> int:
    """Recompute every day's audit hash chain and report the first break of each
    day: exit 0 when every chain is intact, 1 when one is broken. Anchor the heads
    that --json prints elsewhere to catch a cut-off tail too.

    Each day says whether its records were sealed here or brought by `gormes
    import` (IMPORTED, or MIXED with both: which import, its file's name and
    sha256), and when records sealed here chain onto an imported one. An
    imported chain verifies as its file made it: check it against the heads
    anchored where it came from."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from datetime import date

    import msgspec

    from gormes.events.audit_chain import verify_chains
    from gormes.errors import UserError
    from gormes.events.catalog import load_all
    from gormes.events.codec import default_codec

    if since is not None:
        try:
            since = date.fromisoformat(since.strip()).isoformat()
        except ValueError:
            raise UserError(f"invalid day {since!r}: give YYYY-MM-DD") from None
    load_all()
    conn = _open(obj)
    try:
        days = verify_chains(conn, default_codec, since_day=since)
    finally:
        conn.close()
    for day in days:
        if as_json:
            click.echo(msgspec.json.encode(day).decode())
        elif day.first_break is None:
            legacy = f", {day.unsealed} written before the chain" if day.unsealed else ""
            status = "intact" if day.origin == "here" else f"{day.origin.upper()}, chain intact"
            click.echo(f"{day.day}: {status}, {day.sealed} sealed record(s){legacy}{origin_of(day)}, head {day.head}")
        else:
            b = day.first_break
            expected = "" if b.expected is None else f" (expected {b.expected}, found {b.found})"
            click.echo(f"{day.day}: BROKEN at position {b.position} (version {b.version}): {b.reason}{expected}"
                       + ("" if day.origin == "here" else origin_of(day)))
    if not days and not as_json:
        click.echo("no audit records")
    return 1 if any(not d.intact for d in days) else 0


def origin_of(day: Any) -> str:
    """Where a day's records come from (decision 0087): sealed here, or brought by
    which import, and whether this log's chain goes on from an imported head."""
    if day.origin == "here":
        return ", all sealed here"
    import json  # names as JSON quotes them: a file named to read as this line's own words stays a name

    imports = "; ".join(
        f"{i.records} brought in by the import recorded at position {i.position} ({i.at}, caller "
        f"{json.dumps(i.caller)} ({i.trust}), file {json.dumps(i.name)}, sha256 {i.sha256 or '-'})"
        for i in day.imports)
    text = f", {day.here} sealed here, {imports}" if day.here else f", none sealed here: {imports}"
    join = day.onto_import
    if join is not None:
        text += (f"; the records sealed here chain onto an imported record (position {join.onto_position}) "
                 f"from position {join.position} (version {join.version}) on")
    return text


@audit.command()
@click.option("--since", metavar="T", help="Only calls started from this time on (ISO-8601, or an age: 30m, 2h, 7d).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per call (the export's record).")
@click.pass_obj
def unfinished(obj: Any, since: str | None, as_json: bool) -> None:
    """List the calls started with no outcome recorded: a write-ahead operation
    (knowledge.write, memory.mirror, projections.rebuild, shell.run) whose process
    ended mid-call, or that still runs. Its effect may have happened: check it.
    Read from the open calls' index; a note on standard error says when the log
    was scanned instead (no index yet, or none this session may read)."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import time

    import msgspec

    from gormes.audit_export import make_filter
    from gormes.audit_unfinished import described, find_open_calls, index_hint, scan_note
    from gormes.events.catalog import load_all
    from gormes.events.codec import default_codec

    load_all()
    since_ms = make_filter(since, None, (), time.time()).since_ms
    conn = _open(obj)
    try:
        found = find_open_calls(conn, default_codec, since_ms)
    finally:
        conn.close()
    for call in found.calls:
        click.echo(msgspec.json.encode(call).decode() if as_json else described(call))
    if not found.calls and not as_json:
        click.echo("no call without its outcome")
    note = scan_note(found)
    if note is not None:  # on standard error: --json's output stays one record per line
        click.echo(f"gormes: note: {note}; {index_hint(found.index)}", err=True)


def _open(obj: Any) -> Any:
    """A read-only connection that runs the export's `?` SQL: sqlite3's, or a
    PortableConnection on a read-only PostgreSQL session."""
    if obj.url is not None:
        # Lazy for start-up time: loaded when the command runs, not for its --help.
        from gormes.events.postgres_schema import connect_read_only
        from gormes.events.postgres_sql import PortableConnection

        return PortableConnection(connect_read_only(obj.url, application_name="gormes audit"))
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.events.sqlite_log import SQLiteLog

    return SQLiteLog(obj.db, readonly=True, create=False).conn
