"""The log as JSON lines: one object per event, for export, import and `tail --json`.

Each line is

    {"position": 7, "stream": "job-1", "version": 2, "type": "note.added",
     "schema_version": 1, "recorded_at": 1700000000.25, "data": {...}}

where `data` is the event's JSON exactly as stored (it is copied, not decoded and
re-encoded, so a row this gormes cannot decode is exported unchanged).

Import reads lines of the same shape (a gzip-compressed file too: an archived
segment); only `stream`, `type` and `data` are required. A file is streamed: each
line is validated and appended in turn, all in one transaction, so memory stays
bounded by a chunk of lines and a bad line undoes the whole import: a file is
imported whole or not at all. When a line carries
`version`, the stream must be at `version - 1` when that line is appended, so
importing the same export twice fails instead of duplicating it. An audit
day this log already holds another chain of goes onto a copy of the day where
its records follow (gormes/events/audit_copies.py, decision 0091).
"""

from __future__ import annotations

import gzip
import hashlib
import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import msgspec

from gormes.errors import ConcurrencyError, UserError
from gormes.events import audit_open
from gormes.events.audit_copies import AuditPlacement
from gormes.events.base import Event, Recorded, UnknownEvent
from gormes.events.codec import Codec, default_codec
from gormes.events.imports import IMPORTED_TYPE, IMPORTS_STREAM, is_marker_line
from gormes.events.inflate_guard import guarded_lines
from gormes.events.json_nesting import checked_lines
from gormes.events.sql_fragments import is_glob
from gormes.events.sqlite_log import SQLiteLog
from gormes.events.store import AppendRequest, EventLog

PAGE = 2000
IMPORT_CHUNK = 5000  # lines appended between two flushes of a streamed import
GZIP_MAGIC = b"\x1f\x8b"


class StoredJSONCodec(Codec):
    """Reads rows without interpreting them: every event comes back as an
    `UnknownEvent` whose `data` is the stored JSON text (a `msgspec.Raw`)."""

    def decode(self, tag: str, schema_version: int, data: str | bytes) -> Any:
        return UnknownEvent(type=tag, data=msgspec.Raw(data), schema_version=schema_version)


STORED_JSON = StoredJSONCodec()


class EventLine(msgspec.Struct):
    position: int
    stream: str
    version: int
    type: str
    schema_version: int
    recorded_at: float
    data: msgspec.Raw


_encoder = msgspec.json.Encoder()


def stored_json(record: Recorded) -> msgspec.Raw:
    """The event's data as JSON text: the stored text when read with `STORED_JSON`."""
    event = record.event
    if isinstance(event, UnknownEvent) and isinstance(event.data, msgspec.Raw):
        return event.data
    _, _, text = default_codec.encode(event)
    return msgspec.Raw(text)


def to_line(record: Recorded) -> bytes:
    """One event as one JSON line (with the trailing newline)."""
    event = record.event
    schema_version = event.schema_version
    line = EventLine(
        record.position, record.stream, record.version, record.type,
        schema_version, record.recorded_at, stored_json(record),
    )
    return _encoder.encode(line) + b"\n"


# -- reading ----------------------------------------------------------------


def open_for_reading(target: Any) -> Any:
    """Open an existing gormes database read-only, decoding nothing: an SQLite
    file, or (a `postgresql://` URL) a PostgresLog on a read-only session."""
    from gormes.events.open import is_postgres_url

    if is_postgres_url(target):
        from gormes.events.postgres_log import PostgresLog
        from gormes.events.postgres_schema import connect_read_only

        return PostgresLog(connect_read_only(target, application_name="gormes export"),
                           codec=STORED_JSON)
    return SQLiteLog(target, readonly=True, create=False, codec=STORED_JSON)


def select(
    log: EventLog,
    after: int = 0,
    *,
    types: Sequence[str] = (),
    streams: Sequence[str] = (),
    limit: int | None = None,
    upto: int | None = None,
) -> list[Recorded]:
    """Events after `after` (up to `upto`), filtered by type and stream
    (exact names or GLOB patterns such as `job.*`), in position order, with
    their data as stored (`STORED_JSON`), on either database."""
    rows = log.select_rows(after, limit, types or None, streams=streams or None, upto=upto)
    return STORED_JSON.decode_rows(rows, Recorded)


def pages(
    log: EventLog,
    after: int = 0,
    *,
    types: Sequence[str] = (),
    streams: Sequence[str] = (),
    limit: int | None = None,
    upto: int | None = None,
    page: int = PAGE,
) -> Iterator[list[Recorded]]:
    """Like `select`, a page at a time, so a large log never sits in memory.

    Pass `upto` (the head when the read began) for a consistent snapshot: the
    positions up to it are committed and never change.
    """
    if upto is None:
        upto = log.head()
    remaining = limit
    while remaining is None or remaining > 0:
        size = page if remaining is None else min(page, remaining)
        records = select(log, after, types=types, streams=streams, limit=size, upto=upto)
        if not records:
            return
        yield records
        after = records[-1].position
        if remaining is not None:
            remaining -= len(records)


def audit_kind_matcher(kinds: Sequence[str]) -> Callable[[Recorded], bool]:
    """A test of records against audit kinds (`audit.operation`'s `audit_kind`).

    With no kinds every record passes; with kinds, only audit events of one of them."""
    if not kinds:
        return lambda record: True
    wanted = set(kinds)

    def keep(record: Recorded) -> bool:
        if not record.type.startswith("audit."):
            return False
        data = msgspec.json.decode(stored_json(record))
        return isinstance(data, dict) and data.get("audit_kind") in wanted

    return keep


def stream_matcher(patterns: Sequence[str]) -> Callable[[str], bool]:
    """A test of stream names against exact names or GLOB patterns, exactly as
    `select` does in SQL (SQLite itself evaluates the GLOB), for filtering events
    that arrive by subscription. Answers are cached per stream name."""
    if not patterns:
        return lambda stream: True
    import sqlite3

    exact = [p for p in patterns if not is_glob(p)]
    globs = [p for p in patterns if p not in exact]
    known: dict[str, bool] = {}

    def matches(stream: str) -> bool:
        answer = known.get(stream)
        if answer is None:
            answer = stream in exact
            if not answer and globs:
                conn = sqlite3.connect(":memory:")
                try:
                    answer = any(
                        conn.execute("SELECT ? GLOB ?", (stream, g)).fetchone()[0] for g in globs
                    )
                finally:
                    conn.close()
            if len(known) > 100_000:
                known.clear()
            known[stream] = answer
        return answer

    return matches


def count(log: EventLog, after: int = 0, upto: int | None = None) -> int:
    """How many positions lie in (after, upto]: the work an export will scan."""
    head = log.head() if upto is None else upto
    return max(0, head - after)


def export(
    log: EventLog,
    out: IO[bytes],
    after: int = 0,
    *,
    types: Sequence[str] = (),
    streams: Sequence[str] = (),
    upto: int | None = None,
    on_page: Callable[[int], None] | None = None,
) -> int:
    """Write events after `after` as JSON lines; returns how many were written.

    `on_page(position)` is called after each page with the last position scanned.
    """
    written = 0
    for records in pages(log, after, types=types, streams=streams, upto=upto):
        out.write(b"".join(to_line(r) for r in records))
        written += len(records)
        if on_page is not None:
            on_page(records[-1].position)
    return written


# -- importing --------------------------------------------------------------


class ImportLine(msgspec.Struct, forbid_unknown_fields=False):
    stream: str
    type: str
    data: dict[str, Any]
    version: int | None = None
    schema_version: int | None = None


class ParsedLine(msgspec.Struct, frozen=True):
    number: int
    stream: str
    event: Event
    version: int | None


class ImportResult(msgspec.Struct, frozen=True):
    imported: int
    first_position: int
    last_position: int
    sha256: str | None = None  # of the file's bytes (an import of a file)
    left_out: int = 0  # the input's own `log.imported` lines (gormes/events/imports.py)
    # an audit day's stream in the input -> the one it went to (a copy, audit_copies.py)
    placed: dict[str, str] = {}


_line_decoder = msgspec.json.Decoder(ImportLine)


def parse_line(number: int, text: str | bytes, codec: Codec = default_codec) -> ParsedLine:
    """Validate one line strictly; a `UserError` names the line and what is wrong."""
    try:
        line = _line_decoder.decode(text)
    except msgspec.ValidationError as exc:
        raise UserError(f"line {number}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise UserError(f"line {number}: malformed JSON: {exc}") from None
    if not line.stream:
        raise UserError(f"line {number}: stream must not be empty")
    if "\x00" in line.stream:  # the store refuses it too (UnstorableStream); here the line is named
        raise UserError(f"line {number}: the stream name holds U+0000 (NUL), which PostgreSQL cannot store")
    if line.version is not None and line.version < 1:
        raise UserError(f"line {number}: version must be at least 1, not {line.version}")
    inner = line.data.get("type")
    if inner is not None and inner != line.type:
        raise UserError(f"line {number}: data says type {inner!r} but the line says {line.type!r}")
    try:
        event = codec.parse(line.type, line.data, line.schema_version)
    except UserError as exc:
        raise UserError(f"line {number}: {exc}") from None
    return ParsedLine(number, line.stream, event, line.version)


def parse_lines(lines: Iterable[str | bytes], codec: Codec = default_codec) -> list[ParsedLine]:
    """Validate every line (blank lines are skipped) before anything is written."""
    parsed = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        parsed.append(parse_line(number, text, codec))
    return parsed


def iter_parsed(lines: Iterable[str | bytes], codec: Codec = default_codec) -> Iterator[ParsedLine]:
    """`parse_lines` one line at a time, for inputs too large to hold."""
    for number, text in enumerate(lines, start=1):
        if text.strip():
            yield parse_line(number, text, codec)


class _Hashing(io.RawIOBase):
    """A file read through it updates `sha` with every byte read: the digest of
    the bytes imported, not of a second read that could find others."""

    def __init__(self, raw: IO[bytes], sha: Any) -> None:
        self.raw, self.sha, self.at = raw, sha, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self.raw.readinto(buffer)  # type: ignore[attr-defined]
        self.sha.update(memoryview(buffer)[:n])
        self.at += n
        return n

    def tell(self) -> int:
        return self.at


@contextmanager
def open_lines(path: str | Path, sha: Any = None) -> Iterator[Iterable[bytes]]:
    """The lines of a JSONL file, gunzipped when it is compressed (an archived
    segment; refused if it inflates like a bomb, gormes/events/inflate_guard.py);
    a `UserError` when it cannot be read. `sha` (a hashlib object): updated with
    the file's bytes, all of them once the caller's block ends."""
    try:
        with open(path, "rb", buffering=0) as plain:
            compressed = plain.read(2) == GZIP_MAGIC
            plain.seek(0)
            raw = io.BufferedReader(plain if sha is None else _Hashing(plain, sha), 1 << 16)
            if not compressed:
                yield raw
            else:
                with gzip.GzipFile(fileobj=raw) as unzipped:
                    yield guarded_lines(raw, unzipped, str(path))  # type: ignore[misc]
            while sha is not None and raw.read(1 << 20):  # what follows the last line read
                pass
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None


def import_file_in(tx: Any, path: str | Path, *, check_versions: bool = True,
                   chunk: int = IMPORT_CHUNK, seen: Callable[[ParsedLine], None] | None = None) -> ImportResult:
    """Stream a JSONL file (gzip or plain) into a store transaction: each line is
    checked, parsed and appended in turn, and staged rows are flushed every `chunk`
    lines, so the memory it takes does not grow with the file. A bad line raises
    `UserError` naming it, and the transaction (every line before it) is undone.
    `seen` is shown each line before it is appended."""
    imported = first = last = left_out = 0
    audited = False
    placement = AuditPlacement(tx, check_versions=check_versions)
    placed = placement.stream_for
    sha = hashlib.sha256()
    with open_lines(path, sha) as lines:
        try:
            for line in iter_parsed(checked_lines(lines)):
                if marker_line(line):
                    left_out += 1
                    continue
                if seen is not None:
                    seen(line)
                audited = audited or line.event.type == audit_open.AUDIT_TYPE
                result = append_lines(tx.append_many, (line,), check_versions=check_versions, placed=placed)
                first = first or result.first_position
                last = result.last_position
                imported += 1
                if imported % chunk == 0:
                    tx.flush()
        except (OSError, EOFError) as exc:  # a truncated or corrupt gzip stream
            raise UserError(f"cannot read {path}: {exc}") from None
    if not imported:
        raise UserError(f"{path} holds no events" + _only_markers(left_out))
    if audited:
        _reindex_audit(tx)
    return ImportResult(imported, first, last, sha.hexdigest(), left_out, dict(placement.targets))


def marker_line(line: ParsedLine) -> bool:
    """True for a `log.imported` line, left out of every import (decision 0087); a
    `UserError` for any other line on `log-imports`, which only imports write."""
    if not is_marker_line(line.stream, line.event.type):
        return False
    if line.event.type != IMPORTED_TYPE:
        raise UserError(f"line {line.number}: stream {IMPORTS_STREAM!r} holds only the log's own "
                        f"{IMPORTED_TYPE} records, written by `gormes import`; not a {line.event.type}")
    return True


def _only_markers(left_out: int) -> str:
    return f" but {left_out} {IMPORTED_TYPE} record(s), which an import leaves out" if left_out else ""


def import_lines(
    log: SQLiteLog, lines: Sequence[ParsedLine], *, check_versions: bool = True
) -> ImportResult:
    """Append every parsed line in one transaction: all of them or none."""
    if not lines:
        return ImportResult(0, 0, 0)
    return log.write_now(lambda batch: append_lines(batch.append, lines, check_versions=check_versions))


def import_lines_in(tx: Any, lines: Sequence[ParsedLine], *, check_versions: bool = True) -> ImportResult:
    """`import_lines` inside a store transaction (`store.transact`), on either
    backend; the `log.imported` lines are left out (`marker_line`)."""
    kept = [line for line in lines if not marker_line(line)]
    left_out = len(lines) - len(kept)
    if not kept:
        if left_out:
            raise UserError("the import holds no events" + _only_markers(left_out))
        return ImportResult(0, 0, 0)
    placement = AuditPlacement(tx, check_versions=check_versions)
    result = append_lines(tx.append_many, kept, check_versions=check_versions, placed=placement.stream_for)
    if any(line.event.type == audit_open.AUDIT_TYPE for line in kept):
        _reindex_audit(tx)
    return msgspec.structs.replace(result, left_out=left_out, placed=dict(placement.targets))


def _reindex_audit(tx: Any) -> None:
    """Audit records copied in raw, not sealed here: the open write-ahead calls'
    index built again from the log, which now holds them (gormes/events/audit_open.py)."""
    tx.execute("SELECT 1")  # the staged lines sent first
    audit_open.refresh(tx.conn)


def append_lines(
    append: Callable[[Sequence[AppendRequest]], Any], lines: Sequence[ParsedLine], *, check_versions: bool,
    placed: Callable[[str, Event, int | None], str] | None = None,
) -> ImportResult:
    """Append the lines one by one through `append` (a batch's or a transaction's);
    `placed` names the stream of each (an audit day's copy: gormes/events/audit_copies.py)."""
    first = last = 0
    for line in lines:
        expected = line.version - 1 if check_versions and line.version is not None else None
        stream = line.stream if placed is None else placed(line.stream, line.event, line.version)
        try:
            result = append([AppendRequest(stream, [line.event], expected)])[0]
        except ConcurrencyError as exc:
            raise UserError(
                f"line {line.number}: stream {stream!r} is at version {exc.actual}, "
                f"so the line's version {line.version} does not follow "
                "(already imported? use --ignore-versions to append anyway)"
            ) from None
        first = first or result.first_position
        last = result.last_position
    return ImportResult(len(lines), first, last)
