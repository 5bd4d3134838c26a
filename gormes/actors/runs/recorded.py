"""Recorded runs, as replay reads them: from the database or from a JSONL file.

A `RecordedRun` is one run's stream split into what replay needs: its
`run.started`, its observations in `seq` order, and how it ended. A `RunSource`
hands out recorded runs by id; `DatabaseRuns` reads a gormes database read-only,
`FileRuns` a JSONL file in the shape `gormes export` writes (no database needed).

Anything replay cannot trust is refused with one clear `UserError` line before
any handler runs: an unknown run id, a line that is not JSON (a truncated file),
an event type or schema version this gormes does not know (a run recorded by an
incompatible gormes), data that does not fit its type (a model reply that is not
valid), or observations with gaps in their `seq`. A recording that does not agree
with itself (a tool call whose arguments do not hash to their recorded
`args_hash`: edited after the fact) is refused as `TamperedRecording` (exit 1),
naming the position and the field. (The model requests themselves are not
recorded, only their hashes, which replay compares with the requests it makes.)
"""

from __future__ import annotations

import functools
import hashlib
import operator
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol, Self

import msgspec

from gormes.actors.runs.replay_report import redacted_note
from gormes.errors import InvalidEventData, UnknownEventType, UserError
from gormes.events.base import Recorded, RedactedEvent, UnknownEvent
from gormes.events.catalog import load_all
from gormes.events.codec import default_codec
from gormes.events.jsonl import open_lines
from gormes.events.open import is_postgres_url, require_database
from gormes.events.run_export import UnknownRun, run_stream_name
from gormes.events.runs import (
    OBSERVATION_TYPES,
    TERMINAL_TYPES,
    RunChildSpawned,
    RunLlmCut,
    RunMessageSent,
    RunResumed,
    RunStarted,
    RunSuspended,
    RunToolCalled,
)
from gormes.events.sqlite_log import SQLiteLog

__all__ = [
    "DatabaseRuns",
    "FileRuns",
    "IncompatibleRecording",
    "RecordedRun",
    "RunSource",
    "TamperedRecording",
    "UnknownRun",
    "split_run",
]


class IncompatibleRecording(UserError):
    """A run holds events this gormes cannot read: recorded by another version."""


class RedactedRecording(UserError):
    """A run whose run.started was redacted (decision 0026): nothing to replay
    against; a failed check (exit 1), not bad input."""

    exit_code = 1


class TamperedRecording(UserError):
    """A recording whose recorded digests do not match what they digest: a failed
    check (exit 1), not bad input."""

    exit_code = 1


def check_digests(run_id: str, observations: Iterable[Recorded]) -> None:
    """Every tool call's `arguments` hash to its `args_hash` (the sha256 of the
    text as recorded), or `TamperedRecording` naming the first that does not."""
    known: dict[str, str] = {}  # a run repeats the same arguments: hash each text once
    for record in observations:
        e = record.event
        if type(e) is not RunToolCalled:
            continue
        digest = known.get(e.arguments)
        if digest is None:
            digest = known[e.arguments] = hashlib.sha256(e.arguments.encode("utf-8", "surrogatepass")).hexdigest()
        if digest != e.args_hash:
            raise TamperedRecording(
                f"run {run_id!r}: the recording does not agree with itself at position {record.position} "
                f"(seq {e.seq}): field arguments hashes to {digest[:16]}..., but args_hash is "
                f"{e.args_hash[:16]}... (edited after it was recorded?)"
            )


_OBSERVATION_TAGS = frozenset(cls.__struct_config__.tag for cls in OBSERVATION_TYPES)  # type: ignore[attr-defined]


class RecordedRun(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    started: RunStarted
    started_position: int
    observations: tuple[Recorded, ...]  # in seq order: seq i is observations[i - 1]
    end: Recorded | None  # run.completed | run.failed | run.cancelled, None while running
    records: tuple[Recorded, ...]  # the whole stream, in version order

    @property
    def child_run_ids(self) -> list[str]:
        return [r.event.child_run_id for r in self.observations if isinstance(r.event, RunChildSpawned)]


class RunSource(Protocol):
    def load(self, run_id: str) -> RecordedRun: ...


def split_run(run_id: str, records: Iterable[Recorded], *, all_known: bool = False) -> RecordedRun:
    """Check a run's stream and split it into start, observations and end.
    `all_known`: the records were decoded as current run event types (no
    `UnknownEvent` among them), as `decode_run_rows` does."""
    records = tuple(records)
    if not records:
        raise UnknownRun(f"no run {run_id!r} (no events on stream {run_stream_name(run_id)!r})")
    if not all_known:
        for record in records:
            if isinstance(record.event, UnknownEvent):
                raise IncompatibleRecording(
                    f"run {run_id!r} was recorded by an incompatible gormes: the event at "
                    f"position {record.position} has type {record.type!r} (schema version "
                    f"{record.event.schema_version}), which this gormes cannot read"
                )
    first = records[0]
    if isinstance(first.event, RedactedEvent):
        raise RedactedRecording(f"run {run_id!r} cannot be replayed: {redacted_note(first)}")
    if not isinstance(first.event, RunStarted):
        raise UserError(
            f"run {run_id!r} does not begin with run.started (position {first.position} "
            f"is {first.type!r}): the recording is incomplete"
        )
    observations = [r for r in records if r.type in _OBSERVATION_TAGS]
    seqs = [r.event.seq for r in observations]  # type: ignore[union-attr]
    if seqs != list(range(1, len(seqs) + 1)):
        observations.sort(key=lambda r: r.event.seq)  # type: ignore[union-attr]
        for expected, record in enumerate(observations, start=1):
            seq = record.event.seq  # type: ignore[union-attr]
            if seq != expected:
                raise UserError(
                    f"run {run_id!r}: observation seq {expected} is missing (position "
                    f"{record.position} has seq {seq}): the recording is incomplete"
                )
    check_digests(run_id, observations)
    end = next((r for r in reversed(records) if isinstance(r.event, TERMINAL_TYPES)), None)
    return RecordedRun(
        run_id=run_id,
        started=first.event,
        started_position=first.position,
        observations=tuple(observations),
        end=end,
        records=records,
    )


class DatabaseRuns:
    """Runs read from a gormes database, opened read-only (replay never writes):
    an SQLite file, or a PostgreSQL URL."""

    def __init__(self, path: str | Path) -> None:
        load_all()
        self._sqlite = not is_postgres_url(path)
        if self._sqlite:
            require_database(path)
            path = Path(path)
            self._log: Any = SQLiteLog(path, readonly=True, create=False)
        else:
            self._log = _postgres_log(str(path))
        self._sql: Any = self._log.sql  # runs the `?` SQL below, on either database

    def load(self, run_id: str) -> RecordedRun:
        stream = run_stream_name(run_id)
        if self._sqlite:
            rows = _sqlite_run_rows(self._sql, stream)
        else:
            rows = self._sql.execute(_RUN_ROWS + "WHERE stream = ? ORDER BY version", (stream,)).fetchall()
        records = decode_run_rows(stream, rows)
        if records is None:  # an event type or version the fast path does not take
            return split_run(run_id, self._log.read_stream(stream))
        return split_run(run_id, records, all_known=True)

    def head(self) -> int:
        return self._log.head()

    def close(self) -> None:
        self._log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_RUN_ROWS = "SELECT position, version, type, type_version, data, recorded_at FROM events "
# A run's events are written while it runs, so they lie close together in the log.
# When they are at least 1 in _DENSE of the positions between the run's first and
# last event, one scan of that rowid range (skipping the other streams' rows) reads
# them faster than one index lookup per event, as `ORDER BY version` does.
_DENSE = 8


def _sqlite_run_rows(conn: Any, stream: str) -> list[tuple[Any, ...]]:
    """A run's rows in version order, from one snapshot."""
    conn.execute("BEGIN")
    try:
        first, last, count = conn.execute(
            "SELECT min(position), max(position), count(*) FROM events WHERE stream = ?", (stream,)
        ).fetchone()
        if not count or last - first + 1 > _DENSE * count:
            return conn.execute(_RUN_ROWS + "WHERE stream = ? ORDER BY version", (stream,)).fetchall()
        # `+stream`: no index for this term, so SQLite walks the rowid range
        rows = conn.execute(
            _RUN_ROWS + "WHERE position BETWEEN ? AND ? AND +stream = ? ORDER BY position",
            (first, last, stream),
        ).fetchall()
    finally:
        conn.execute("COMMIT")
    # One writer numbers positions in commit order, so a stream's versions rise
    # with its positions; a log written otherwise is put in version order here.
    versions = list(map(_VERSION, rows))
    if versions != sorted(versions):
        rows.sort(key=_VERSION)
    return rows


def _postgres_log(url: str) -> Any:
    """A PostgresLog on an existing gormes schema (nothing is created)."""
    # Lazy for start-up time: psycopg is loaded only for a PostgreSQL URL.
    from gormes.events.postgres_log import PostgresLog
    from gormes.events.postgres_schema import connect, prepare

    conn = connect(url)
    try:
        prepare(conn, url, create=False)
    except BaseException:
        conn.close()
        raise
    return PostgresLog(conn)


_RUN_CLASSES: dict[str, type] = {
    cls.__struct_config__.tag: cls  # type: ignore[attr-defined]
    for cls in (*OBSERVATION_TYPES, *TERMINAL_TYPES, RunStarted, RunSuspended, RunResumed, RunLlmCut,
                RunMessageSent)
}
_CURRENT_VERSIONS: dict[str, int] = {tag: cls.schema_version for tag, cls in _RUN_CLASSES.items()}  # type: ignore[attr-defined]
_run_events_decoder = msgspec.json.Decoder(list[functools.reduce(operator.or_, _RUN_CLASSES.values())])  # type: ignore[misc]


_VERSION = operator.itemgetter(1)
_TYPE_AND_VERSION = operator.itemgetter(2, 3)
_DATA = operator.itemgetter(4)


def decode_run_rows(stream: str, rows: list[tuple[Any, ...]]) -> list[Recorded] | None:
    """A run's rows (position, version, type, type_version, data, recorded_at) decoded
    in one msgspec call (the whole list at once), or None when a row is not a
    current run event type: then the codec decodes row by row (upcasting older
    versions, keeping unknown ones as `UnknownEvent`)."""
    current = _CURRENT_VERSIONS
    for type_, type_version in set(map(_TYPE_AND_VERSION, rows)):
        if current.get(type_) != type_version:
            return None
    try:
        text = "[" + ",".join(map(_DATA, rows)) + "]"  # TypeError: data that is not text
        events = _run_events_decoder.decode(text)
    except (TypeError, msgspec.DecodeError):  # ValidationError included
        return None
    return [
        Recorded(pos, stream, version, type_, event, at)
        for (pos, version, type_, _, _, at), event in zip(rows, events)
    ]


class _FileLine(msgspec.Struct):
    position: int
    stream: str
    version: int
    type: str
    data: dict[str, Any]
    schema_version: int = 1
    recorded_at: float = 0.0


_line_decoder = msgspec.json.Decoder(_FileLine)


def _decode_line(number: int, text: bytes, where: str) -> Recorded:
    try:
        line = _line_decoder.decode(text)
    except msgspec.ValidationError as exc:
        raise UserError(f"{where} line {number}: {exc}") from None
    except msgspec.DecodeError:
        raise UserError(
            f"{where} line {number}: not valid JSON (is the file truncated or corrupt?)"
        ) from None
    try:
        event = default_codec.from_dict(line.type, line.schema_version, line.data)
    except UnknownEventType:
        raise IncompatibleRecording(
            f"{where} line {number}: event type {line.type!r} is unknown to this gormes "
            "(recorded by an incompatible version?)"
        ) from None
    except InvalidEventData as exc:
        reason = str(exc)
        kind = IncompatibleRecording if "newer than this gormes" in reason else UserError
        raise kind(f"{where} line {number}: {reason}") from None
    return Recorded(line.position, line.stream, line.version, line.type, event, line.recorded_at)


class FileRuns:
    """Runs read from a JSONL file (the shape of `gormes export`; gzip-compressed
    too, as an archived segment is): no database."""

    def __init__(self, path: str | Path) -> None:
        load_all()
        path = Path(path)
        if not path.exists():
            raise UserError(f"{path}: no such file")
        # Read a line at a time, keeping the runs' records only: the file's other
        # streams are checked as they pass but take no memory.
        where, runs = str(path), run_stream_name("")
        streams: dict[str, list[Recorded]] = {}
        started: list[RunStarted] = []
        number, seen, ended = 0, 0, True
        with open_lines(path) as lines:  # an archived segment is gzipped (decision 0029)
            try:
                for number, text in enumerate(lines, start=1):
                    ended = text.endswith(b"\n")
                    if not text.strip():
                        continue
                    record = _decode_line(number, text, where)
                    seen += 1
                    if record.stream.startswith(runs):
                        streams.setdefault(record.stream, []).append(record)
                    if isinstance(record.event, RunStarted):
                        started.append(record.event)
            except (OSError, EOFError) as exc:  # a truncated or corrupt gzip stream
                raise UserError(f"cannot read {path}: {exc}") from None
        if not seen:
            raise UserError(f"{where} holds no events")
        if not ended:
            # every exported line ends with a newline: a last line without one was cut off
            raise UserError(f"{where} line {number}: the file ends mid-line (truncated?)")
        for records in streams.values():
            records.sort(key=lambda r: r.version)
        self._streams = streams
        self._started = started
        self.path = path

    def load(self, run_id: str) -> RecordedRun:
        records = self._streams.get(run_stream_name(run_id))
        if not records:
            raise UnknownRun(f"no run {run_id!r} in {self.path}")
        return split_run(run_id, records)

    def root_run_id(self) -> str:
        """The first run in the file that no other run in it spawned."""
        started = self._started
        if not started:
            raise UserError(f"{self.path} holds no run.started: not a run export")
        ids = {s.run_id for s in started}
        for s in started:
            if s.parent_run_id not in ids:
                return s.run_id
        return started[0].run_id
