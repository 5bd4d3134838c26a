"""The audit trail as JSON lines: every `audit.operation` event, one stable record each.

    records = read_audit(conn, AuditFilter(since_ms=..., until_ms=..., kinds=("fs.read",)))
    write_lines(records, sys.stdout.buffer)

`AuditRecord` is the exported shape (documented field by field in docs/audit.md).
It changes only with `AUDIT_SCHEMA_VERSION`: fields are added in a new version,
never renamed or retyped within one. Events live on day streams
`audit-YYYY-MM-DD` (UTC), so a time range reads only the streams of its days.
`conn` is an sqlite3 connection or a PortableConnection (PostgreSQL): the SQL is
the same, JSON access through `gormes.events.sql_fragments`, and stream names
compare byte by byte on both (`COLLATE "C"` on PostgreSQL).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import BinaryIO

import msgspec

from gormes.errors import UserError
from gormes.events import audit_open
from gormes.events.audit import (
    AUDIT_STREAM_PREFIX,
    COPY_MARK,
    AuditOutcome,
    OperationAudited,
    audit_stream,
)
from gormes.events.codec import Codec
from gormes.events.postgres_sql import iter_rows
from gormes.events.sql_fragments import json_number, json_text, text_order

AUDIT_SCHEMA_VERSION = 2  # 2: outcome `started` and `started_position` (decision 0062)
AUDIT_TYPE = "audit.operation"

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d|w)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class InvalidTime(UserError):
    """A --since/--until value that is neither ISO-8601 nor a relative age like 2h."""


class AuditRecord(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int
    position: int
    stream: str
    time: str  # `at` as ISO-8601 UTC with milliseconds
    at: int  # ms since the epoch, from the executor's clock
    operation: str
    audit_kind: str | None
    caller: str
    trust: str
    run_id: str | None
    job_id: str | None
    allowed: bool
    outcome: AuditOutcome
    error: str | None
    duration_ms: float
    input_sha256: str | None
    mutating: bool
    started_position: int | None  # the position of this call's `started` record (write-ahead operations)


class AuditFilter(msgspec.Struct, frozen=True, kw_only=True):
    since_ms: int | None = None  # inclusive
    until_ms: int | None = None  # exclusive
    kinds: tuple[str, ...] = ()  # audit kinds; empty: all
    write_ahead: bool = False  # only write-ahead calls' records: `started`, and those naming one


class AuditExport(msgspec.Struct, kw_only=True):
    written: int = 0
    unreadable: int = 0  # audit rows this gormes cannot decode (a newer schema), left out


def parse_time(text: str, now: float) -> float:
    """Seconds since the epoch for ISO-8601 (no offset means UTC) or an age before
    `now` (`90s`, `15m`, `2h`, `7d`, `1w`)."""
    value = text.strip()
    match = _RELATIVE.match(value)
    if match:
        return now - float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidTime(
            f"invalid time {text!r}: give ISO-8601 (2025-01-31T12:00:00Z) or an age like 30m, 2h, 7d"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def make_filter(since: str | None, until: str | None, kinds: tuple[str, ...], now: float) -> AuditFilter:
    since_ms = None if since is None else int(parse_time(since, now) * 1000)
    until_ms = None if until is None else int(parse_time(until, now) * 1000)
    if since_ms is not None and until_ms is not None and since_ms >= until_ms:
        raise InvalidTime(f"--since {since!r} is not before --until {until!r}")
    return AuditFilter(since_ms=since_ms, until_ms=until_ms, kinds=tuple(kinds))


def iso_ms(at_ms: int) -> str:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=at_ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _query(f: AuditFilter, conn: object) -> tuple[str, list[object]]:
    stream = text_order(conn, "stream")
    sql = ("SELECT position, stream, type_version, data FROM events "
           f"WHERE type = ? AND {stream} >= ? AND {stream} <= ?")
    first = AUDIT_STREAM_PREFIX if f.since_ms is None else audit_stream(f.since_ms)
    # a day's imported copies (audit-<day>~<k>, decision 0091) sort after it
    last = AUDIT_STREAM_PREFIX + "\uffff" if f.until_ms is None else audit_stream(f.until_ms) + COPY_MARK + "\uffff"
    params: list[object] = [AUDIT_TYPE, first, last]
    if f.since_ms is not None:
        sql += f" AND {json_number(conn, '$.at')} >= ?"
        params.append(f.since_ms)
    if f.until_ms is not None:
        sql += f" AND {json_number(conn, '$.at')} < ?"
        params.append(f.until_ms)
    if f.kinds:
        sql += f" AND {json_text(conn, '$.audit_kind')} IN ({','.join('?' * len(f.kinds))})"
        params.extend(f.kinds)
    if f.write_ahead:
        started, named = json_text(conn, "$.outcome"), json_text(conn, "$.started_position")
        sql += f" AND ({started} = 'started' OR {named} IS NOT NULL)"
    return sql + " ORDER BY position", params


def read_audit(
    conn: sqlite3.Connection, f: AuditFilter, codec: Codec, export: AuditExport | None = None
) -> Iterator[AuditRecord]:
    """The matching audit events in log order; rows that do not decode as
    `OperationAudited` are counted in `export.unreadable` and left out."""
    sql, params = _query(f, conn)
    yield from _records(iter_rows(conn, sql, params), codec, export)


def read_open_calls(conn: sqlite3.Connection, codec: Codec) -> Iterator[AuditRecord]:
    """The `started` records no record names, in log order, from the open calls'
    index (gormes/events/audit_open.py; the caller checks it is `current`)."""
    yield from _records(conn.execute(audit_open.OPEN_ROWS).fetchall(), codec, None)


def _records(
    rows: Iterable[tuple[int, str, int, str]], codec: Codec, export: AuditExport | None
) -> Iterator[AuditRecord]:
    for position, stream, type_version, data in rows:
        event = codec.decode(AUDIT_TYPE, type_version, data)
        if not isinstance(event, OperationAudited):
            if export is not None:
                export.unreadable += 1
            continue
        yield to_record(position, stream, event)


def to_record(position: int, stream: str, e: OperationAudited) -> AuditRecord:
    return AuditRecord(
        schema_version=AUDIT_SCHEMA_VERSION, position=position, stream=stream,
        time=iso_ms(e.at), at=e.at, operation=e.operation, audit_kind=e.audit_kind,
        caller=e.caller, trust=e.trust, run_id=e.run_id, job_id=e.job_id, allowed=e.allowed,
        outcome=e.outcome, error=e.error, duration_ms=e.duration_ms,
        input_sha256=e.input_sha256, mutating=e.mutating, started_position=e.started_position,
    )


def write_lines(records: Iterator[AuditRecord], out: BinaryIO, export: AuditExport) -> None:
    encoder = msgspec.json.Encoder()
    for record in records:
        out.write(encoder.encode(record) + b"\n")
        export.written += 1
    out.flush()
