"""Retention: whole streams archived to a compressed segment, then deleted (decision 0029).

Inside ONE write transaction (`store.transact`), for the streams chosen
(gormes/projections/retention.py says which):

    manifest = archive_and_delete(tx, streams, directory, by=..., horizon=...)

1. their events are written, in position order, as `gormes export` lines
   (gormes/events/jsonl.py) to `<directory>/retained-<first>-<last>.jsonl.gz`
   (gzip, written to `.part`, fsynced, renamed), with a manifest beside it
   (`.manifest.json`: the position range, the counts, the segment's sha256);
2. they are deleted from the log;
3. one `log.retained` event on `log-retention` records the manifest.

All three commit together or not at all. The files are made before the commit:
a process killed after the rename and before the commit leaves a segment no
`log.retained` names (an orphan: its events are all still in the log; the next
retention writes it again). Positions of the remaining events do not change; the
`log.retained` event is appended after the head, so `max(position)` never goes
back and no position is ever given out twice. The holes retention leaves are
accounted for by the `log.retained` events (`retained_events`), which the
doctor's positions check reads.

An archived segment is imported back with `gormes import SEGMENT` (new
positions, the same streams and versions) and a run in it replays with
`gormes replay RUN --file SEGMENT`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import msgspec

from gormes.events.base import Event, Recorded
from gormes.events.jsonl import STORED_JSON, to_line
from gormes.events.postgres_sql import POSTGRES, dialect_of, iter_rows
from gormes.events.sql_fragments import json_number
from gormes.events.sqlite_schema import BUSY_TIMEOUT_S
from gormes.events.store import Transaction

RETENTION_STREAM = "log-retention"
SEGMENT_SUFFIX = ".jsonl.gz"
MANIFEST_SUFFIX = ".manifest.json"
CHUNK = 500  # streams per INSERT into the temporary table
_TEMP = "retain_streams"


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """What one segment holds; written beside it and recorded in `log.retained`."""

    segment: str  # the segment's file name (in the manifest's directory)
    sha256: str  # of the segment file as written (compressed)
    bytes: int  # the segment file's size
    events: int
    streams: int
    kinds: dict[str, int]  # streams per kind ("job", "run", "cron")
    types: dict[str, int]  # events per type
    first_position: int
    last_position: int
    horizon: float  # the streams' last events were recorded before this (epoch seconds)
    at: float  # when the retention ran
    by: str  # who ran it (trust:id)


class LogRetained(Event, tag="log.retained", kw_only=True):
    """The events of `manifest.streams` streams were archived to a segment and deleted."""

    manifest: Manifest


def kind_of(stream: str) -> str:
    return stream.split("-", 1)[0]


def segment_name(first: int, last: int) -> str:
    return f"retained-{first:012d}-{last:012d}{SEGMENT_SUFFIX}"


def manifest_path(segment: Path) -> Path:
    return segment.with_name(segment.name[: -len(SEGMENT_SUFFIX)] + MANIFEST_SUFFIX)


class _Hashing:
    """A binary file that hashes and counts what is written to it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def _fill_temp(tx: Transaction, streams: Sequence[str]) -> None:
    on_commit = " ON COMMIT DROP" if tx.dialect == POSTGRES else ""
    tx.execute(f"CREATE TEMP TABLE {_TEMP}(stream TEXT PRIMARY KEY){on_commit}")
    conn = tx.conn
    for i in range(0, len(streams), CHUNK):
        conn.executemany(f"INSERT INTO {_TEMP}(stream) VALUES (?)", [(s,) for s in streams[i : i + CHUNK]])


def _rows_sql() -> str:
    return (
        "SELECT position, stream, version, type, type_version, data, recorded_at FROM events "
        f"WHERE stream IN (SELECT stream FROM {_TEMP}) ORDER BY position"
    )


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_segment(rows: Iterable[tuple[Any, ...]], directory: Path, *, horizon: float, at: float,
                  by: str) -> tuple[Path, Manifest] | None:
    """Write `rows` (stored rows in position order) as a gzip JSONL segment and its
    manifest in `directory`; None (and no file) when there are no rows."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("retained-*.part"):
        # written inside a retention's transaction, under the write lock we hold
        # now: left by a process killed mid-way, whose transaction never committed
        stale.unlink(missing_ok=True)
    part = directory / f"retained-{os.getpid()}.part"
    events = first = last = 0
    streams: dict[str, None] = {}
    types: dict[str, int] = {}
    with open(part, "wb") as raw:
        hashing = _Hashing(raw)
        with gzip.GzipFile(fileobj=hashing, mode="wb", mtime=0) as out:  # type: ignore[arg-type]
            for row in rows:
                record = STORED_JSON.decode_rows([row], Recorded)[0]
                out.write(to_line(record))
                events += 1
                first = first or record.position
                last = record.position
                streams[record.stream] = None
                types[record.type] = types.get(record.type, 0) + 1
        raw.flush()
        os.fsync(raw.fileno())
    if not events:
        part.unlink()
        return None
    segment = directory / segment_name(first, last)
    kinds: dict[str, int] = {}
    for stream in streams:
        kinds[kind_of(stream)] = kinds.get(kind_of(stream), 0) + 1
    manifest = Manifest(
        segment=segment.name, sha256=hashing.sha.hexdigest(), bytes=hashing.size, events=events,
        streams=len(streams), kinds=dict(sorted(kinds.items())), types=dict(sorted(types.items())),
        first_position=first, last_position=last, horizon=horizon, at=at, by=by,
    )
    os.replace(part, segment)
    listing = manifest_path(segment)
    tmp = listing.with_name(listing.name + ".part")
    tmp.write_bytes(json.dumps(msgspec.to_builtins(manifest), indent=2).encode() + b"\n")
    with open(tmp, "rb") as written:
        os.fsync(written.fileno())
    os.replace(tmp, listing)
    _fsync_dir(directory)
    return segment, manifest


def archive_and_delete(tx: Transaction, streams: Sequence[str], directory: Path, *, by: str,
                       horizon: float) -> tuple[Path, LogRetained] | None:
    """Archive every event of `streams` to a segment in `directory`, delete them
    and append the `log.retained` record, all in `tx` (see the module doc);
    None when they hold no events."""
    if not streams:
        return None
    _fill_temp(tx, list(dict.fromkeys(streams)))
    written = write_segment(iter_rows(tx.conn, _rows_sql()), directory, horizon=horizon, at=tx.now, by=by)
    if written is None:
        tx.execute(f"DROP TABLE {_TEMP}")
        return None
    segment, manifest = written
    deleted = tx.execute(f"DELETE FROM events WHERE stream IN (SELECT stream FROM {_TEMP})").rowcount
    if deleted != manifest.events:  # pragma: no cover - the same snapshot, under the write lock
        raise RuntimeError(f"retention archived {manifest.events} events but deleted {deleted}")
    tx.execute(f"DROP TABLE {_TEMP}")
    tx.forget_streams(streams)
    record = LogRetained(manifest=manifest)
    tx.append(RETENTION_STREAM, [record])
    return segment, record


def retained_events(conn: Any) -> int:
    """How many events every retention so far has deleted (the holes it left)."""
    row = conn.execute(
        f"SELECT coalesce(sum({json_number(conn, '$.manifest.events')}), 0) FROM events "
        "WHERE stream = ? AND type = 'log.retained'", (RETENTION_STREAM,),
    ).fetchone()
    return int(row[0] or 0)


def last_horizon(conn: Any) -> float | None:
    """The horizon of the latest retention, or None when none ran."""
    row = conn.execute(
        f"SELECT {json_number(conn, '$.manifest.horizon')} FROM events "
        "WHERE stream = ? AND type = 'log.retained' ORDER BY version DESC LIMIT 1", (RETENTION_STREAM,),
    ).fetchone()
    return None if row is None or row[0] is None else float(row[0])


class Space(msgspec.Struct, kw_only=True):
    """The database's size: SQLite the file (pages), PostgreSQL the events table."""

    file_bytes: int
    free_bytes: int | None  # SQLite: the freelist (reclaimable); PostgreSQL: None
    auto_vacuum: str | None  # SQLite: none, full or incremental


_AUTO_VACUUM = {0: "none", 1: "full", 2: "incremental"}


def space(sql: Any) -> Space:
    """How big the database on `sql` (a `?` connection) is and how much of it is free."""
    if dialect_of(sql) == POSTGRES:
        size = sql.execute("SELECT pg_total_relation_size('events')").fetchone()[0]
        return Space(file_bytes=int(size), free_bytes=None, auto_vacuum=None)
    page = sql.execute("PRAGMA page_size").fetchone()[0]
    pages = sql.execute("PRAGMA page_count").fetchone()[0]
    free = sql.execute("PRAGMA freelist_count").fetchone()[0]
    mode = sql.execute("PRAGMA auto_vacuum").fetchone()[0]
    return Space(file_bytes=page * pages, free_bytes=page * free, auto_vacuum=_AUTO_VACUUM.get(mode, str(mode)))


def incremental_vacuum(path: str | os.PathLike[str]) -> None:
    """SQLite: give the free pages back to the filesystem (`auto_vacuum=INCREMENTAL`
    files; nothing on others), on a connection of its own, after the retention's
    commit. `executescript` steps the pragma to its end; `execute` would free one
    page at most. The file shrinks at the next checkpoint (`redaction.reclaim`)."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.executescript("PRAGMA incremental_vacuum;")
    finally:
        conn.close()
