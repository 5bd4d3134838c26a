"""Redaction: an event's data replaced in place by a tombstone (decision 0026).

A redacted row keeps its position, stream, version, type and recorded_at; its
`type_version` becomes `REDACTED_SCHEMA_VERSION` (0) and its data
`{"redacted": <Tombstone>}` (who, when, why, the sha256 of the stored JSON
removed, and the observation's `seq` if it had one). The codec decodes such a
row of any type to a `RedactedEvent`. Each transaction that redacts also
appends one `log.redacted` event on `log-redactions` naming what it redacted, so
projections and followers learn of it through the log.

Audit streams are never redacted: they hold no payload (only the input's
sha256) and rewriting one would break its hash chain (decision 0018). Nor is
`log-redactions` itself, nor `log-imports` (which audit records came by an
import, decision 0087).

    with store.transact(lambda tx: redact_in(tx, positions, by="operator:ada", reason="asked")) ...
    await store.read_with(reclaim)   # SQLite: checkpoint the WAL so old pages go

On SQLite the writer sets `secure_delete` for the redacting transaction (freed
bytes are zeroed); `reclaim` truncates the WAL. On PostgreSQL the old row
versions stay in the table file until VACUUM (docs/security.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from gormes.errors import UserError
from gormes.events.audit import AUDIT_STREAM_PREFIX
from gormes.events.base import REDACTED_SCHEMA_VERSION, Event, Tombstone
from gormes.events.imports import IMPORTS_STREAM
from gormes.events.postgres_sql import POSTGRES, dialect_of
from gormes.events.store import EventLog, Transaction

REDACTIONS_STREAM = "log-redactions"
CHUNK = 500  # positions per IN (...) query


class RedactionRefused(UserError):
    """A position that may not be redacted (an audit record, a redaction record)."""


class RedactedEntry(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    stream: str
    version: int
    type: str
    sha256: str  # of the stored JSON removed


class LogRedacted(Event, tag="log.redacted", kw_only=True):
    """Events whose data was replaced by a tombstone in this transaction."""

    entries: tuple[RedactedEntry, ...]
    by: str
    reason: str
    at: float


def redactable(stream: str) -> bool:
    # `log-imports` says which audit records an import brought (decision 0087): a
    # tombstone on it would let them pass for records sealed here.
    return not stream.startswith(AUDIT_STREAM_PREFIX) and stream not in (REDACTIONS_STREAM, IMPORTS_STREAM)


_raw = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def _seq_of(data: str) -> int | None:
    try:
        raw = _raw.decode(data)
    except msgspec.DecodeError:
        return None
    seq = raw.get("seq") if isinstance(raw, dict) else None
    return seq if type(seq) is int else None


def _chunks(values: Sequence[int]) -> Iterable[Sequence[int]]:
    for i in range(0, len(values), CHUNK):
        yield values[i : i + CHUNK]


def redact_in(
    tx: Transaction, positions: Iterable[int], *, by: str, reason: str
) -> LogRedacted | None:
    """Replace each position's data by a tombstone, in the transaction `tx`, and
    append the `log.redacted` record; None when nothing needed it (already
    redacted, or no such position). Raises `RedactionRefused`, writing nothing,
    for an audit record or a redaction record."""
    wanted = sorted(set(positions))
    rows: list[tuple[Any, ...]] = []
    for chunk in _chunks(wanted):
        marks = ", ".join("?" * len(chunk))
        rows += tx.execute(
            "SELECT position, stream, version, type, type_version, data FROM events "
            f"WHERE position IN ({marks}) ORDER BY position", list(chunk),
        ).fetchall()
    for position, stream, _, type_, _, _ in rows:
        if not redactable(stream):
            raise RedactionRefused(
                f"position {position} is a {type_} record on {stream}: audit, redaction and import records "
                "hold no payload and are never redacted (decisions 0026, 0087)"
            )
    secure = _secure_delete(tx, True)
    try:
        entries = []
        for position, stream, version, type_, type_version, data in rows:
            if type_version == REDACTED_SCHEMA_VERSION:
                continue
            text = data if isinstance(data, str) else bytes(data).decode()
            digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            tombstone = Tombstone(by=by, at=tx.now, reason=reason, sha256=digest,
                                  schema_version=type_version, seq=_seq_of(text))
            tx.execute(
                "UPDATE events SET type_version = ?, data = ? WHERE position = ?",
                (REDACTED_SCHEMA_VERSION, _encoder.encode({"redacted": tombstone}).decode(), position),
            )
            entries.append(RedactedEntry(position=position, stream=stream, version=version, type=type_,
                                         sha256=digest))
    finally:
        _secure_delete(tx, secure)
    if not entries:
        return None
    record = LogRedacted(entries=tuple(entries), by=by, reason=reason, at=tx.now)
    tx.append(REDACTIONS_STREAM, [record])
    return record


def _secure_delete(tx: Transaction, on: bool) -> bool:
    """SQLite: set `secure_delete` (freed bytes are zeroed); the value it had."""
    if tx.dialect == POSTGRES:
        return on
    conn = tx.conn
    was = bool(conn.execute("PRAGMA secure_delete").fetchone()[0])
    conn.execute(f"PRAGMA secure_delete = {'ON' if on else 'OFF'}")
    return was


def stream_positions(conn: Any, stream: str) -> list[int]:
    """Every position of `stream`, in version order."""
    rows = conn.execute("SELECT position FROM events WHERE stream = ? ORDER BY version", (stream,))
    return [row[0] for row in rows.fetchall()]


def positions_containing(conn: Any, texts: Iterable[str]) -> list[int]:
    """Positions (outside audit streams, not yet redacted) whose stored JSON
    contains any of `texts` as JSON writes it: once escaped (a string field) or
    twice (inside a JSON string, as a tool call's arguments are). Scans the log."""
    return [position for position, _ in events_containing(conn, texts)]


def events_containing(conn: Any, texts: Iterable[str]) -> list[tuple[int, str]]:
    """(position, stream) of each event `positions_containing` finds."""
    needles: set[str] = set()
    for text in texts:
        if not text:
            continue
        once = _encoder.encode(text).decode()[1:-1]
        needles.add(once)
        needles.add(_encoder.encode(once).decode()[1:-1])
    if not needles:
        return []
    find = "strpos(data, ?) > 0" if dialect_of(conn) == POSTGRES else "instr(data, ?) > 0"
    where = " OR ".join([find] * len(needles))
    rows = conn.execute(
        f"SELECT position, stream FROM events WHERE type_version != ? AND ({where}) ORDER BY position",
        (REDACTED_SCHEMA_VERSION, *sorted(needles)),
    ).fetchall()
    return [(position, stream) for position, stream in rows if redactable(stream)]


def reclaim(log: EventLog) -> bool:
    """After a redaction: on SQLite, checkpoint and truncate the WAL, so the old
    pages (the removed text) leave the WAL file; True if it completed (a reader
    holding an old snapshot keeps it from completing). PostgreSQL: nothing."""
    if log.dialect == POSTGRES:
        return True
    busy, _, _ = log.sql.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return not busy
