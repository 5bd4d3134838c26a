"""The synchronous core of the SQLite event log: appends and reads.

`SQLiteLog` is plain blocking sqlite3. The async store (`sqlite.py`) runs it in
worker threads and adds group commit and subscriptions; the CLI's read commands
and the eventsourcing recorder facade use it directly.

Positions are SQLite rowids of a table without AUTOINCREMENT written by one
writer at a time (the database write lock), so they are gap-free and in commit
order: a rolled-back insert gives its rowid back.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from gormes.errors import ConcurrencyError, StoreError, StoreReadOnly, UserError
from gormes.events.base import Event, Recorded
from gormes.events.codec import Codec, default_codec
from gormes.events.sqlite_schema import (
    VERSION_CACHE_MAX,
    connect,
    default_durability,
    translate_error,
)
from gormes.events.store import AppendRequest, AppendResult

_COLUMNS = "position, stream, version, type, type_version, data, recorded_at"
_INSERT = (
    "INSERT INTO events(stream, version, type, type_version, data, recorded_at) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)


Row = tuple[int, str, int, str, int, Any, float]
InlineApply = Callable[[sqlite3.Connection, list[Recorded]], None]


def _first_stream(item: Any) -> str:
    payload = item.payload
    return payload[0].stream if payload else ""


class SQLiteLog:
    """Blocking access to one gormes database through one connection."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        create: bool = True,
        durability: str | None = None,
        codec: Codec = default_codec,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.codec = codec
        self.clock = clock
        self.durability = durability or default_durability()
        self.conn, self.readonly = connect(
            path, readonly=readonly, create=create, durability=durability
        )
        # Inline projections run inside every write transaction (the job ledger).
        self.inline: list[InlineApply] = []
        # Stream versions as of our last commit. Valid while no other connection
        # has committed, which `PRAGMA data_version` on this connection tells.
        self.version_cache: dict[str, int] = {}
        self._data_version = -1

    def close(self) -> None:
        self.conn.close()

    def reader(self) -> SQLiteLog:
        """Another connection to the same file, for reads from another thread."""
        return SQLiteLog(
            self.path, readonly=self.readonly, create=False,
            durability=self.durability, codec=self.codec, clock=self.clock,
        )

    # -- reads --------------------------------------------------------------

    def head(self) -> int:
        return self.conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]

    def stream_version(self, stream: str) -> int:
        row = self.conn.execute(
            "SELECT coalesce(max(version), 0) FROM events WHERE stream = ?", (stream,)
        ).fetchone()
        return row[0]

    def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM events WHERE stream = ? AND version > ? ORDER BY version",
            (stream, after_version),
        ).fetchall()
        return self._decode(rows)

    def read_streams(self, streams: Iterable[str]) -> dict[str, list[Recorded]]:
        """Several whole streams in one query: {stream: its events in version order}
        (an empty list for a stream with no events)."""
        wanted = list(dict.fromkeys(streams))
        out: dict[str, list[Recorded]] = {stream: [] for stream in wanted}
        if not wanted:
            return out
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM events WHERE stream IN (SELECT value FROM json_each(?))"
            " ORDER BY stream, version",
            (json.dumps(wanted),),
        ).fetchall()
        for record in self._decode(rows):
            out[record.stream].append(record)
        return out

    def read_all(
        self,
        after_position: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        *,
        upto: int | None = None,
    ) -> list[Recorded]:
        sql, params = self._select(after_position, limit, types, upto=upto)
        return self._decode(self.conn.execute(sql, params).fetchall())

    def read_page(
        self, after_position: int, limit: int, types: Sequence[str] | None = None
    ) -> tuple[list[Recorded], int, int]:
        """(events, scanned up to, head), all from one snapshot.

        With a type filter the last matching event can be far behind the head;
        `scanned` lets a follower move past the events it filtered out, and
        `scanned == head` tells it that it has caught up.
        """
        conn = self.conn
        conn.execute("BEGIN")
        try:
            head = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
            upto = min(head, after_position + limit) if types else head
            sql, params = self._select(after_position, limit, types, upto=upto)
            rows = conn.execute(sql, params).fetchall()
        finally:
            conn.execute("COMMIT")
        scanned = rows[-1][0] if len(rows) == limit else max(upto, after_position)
        return self._decode(rows), scanned, head

    def _select(
        self,
        after_position: int,
        limit: int | None,
        types: Sequence[str] | None,
        *,
        upto: int | None = None,
    ) -> tuple[str, list[Any]]:
        sql = f"SELECT {_COLUMNS} FROM events WHERE position > ?"
        params: list[Any] = [after_position]
        if upto is not None:
            sql += " AND position <= ?"
            params.append(upto)
        if types:
            clauses = []
            for t in types:
                clauses.append("type GLOB ?" if any(c in t for c in "*?[") else "type = ?")
                params.append(t)
            sql += " AND (" + " OR ".join(clauses) + ")"
        sql += " ORDER BY position"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return sql, params

    def _decode(self, rows: Iterable[Row]) -> list[Recorded]:
        return self.codec.decode_rows(rows, Recorded)

    # -- writes -------------------------------------------------------------

    def begin(self) -> None:
        if self.readonly:
            raise StoreReadOnly(f"{self.path} is read-only: cannot write events")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            data_version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error as exc:
            self.rollback()
            raise translate_error(exc, self.path) from None
        if data_version != self._data_version or len(self.version_cache) > VERSION_CACHE_MAX:
            self.version_cache.clear()
            self._data_version = data_version

    def commit(self, versions: dict[str, int] | None = None) -> None:
        """Commit; `versions` (streams written and their new versions) feed the cache."""
        try:
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self.rollback()
            raise translate_error(exc, self.path) from None
        if versions:
            self.version_cache.update(versions)

    def rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def append_now(
        self, stream: str, events: Sequence[Event], expected_version: int | None = None
    ) -> AppendResult:
        """Append in a transaction of its own (no group commit): for scripts and tests."""
        self.begin()
        try:
            batch = WriteBatch(self)
            result = batch.append([AppendRequest(stream, events, expected_version)])[0]
            batch.finish()
        except BaseException:
            self.rollback()
            raise
        self.commit(batch.versions)
        return result


class WriteBatch:
    """The writes of one transaction: many callers' appends, checked and inserted.

    Versions are looked up once per stream per batch and kept current as rows are
    added, so a batch of single-event appends costs one lookup per stream and one
    executemany for all of them.
    """

    def __init__(self, log: SQLiteLog) -> None:
        self.log = log
        self.now = log.clock()
        self._cache = log.version_cache  # read-only here: updated only after COMMIT
        self._versions: dict[str, int] = {}
        self._rows: list[tuple[str, int, str, int, str, float]] = []
        self._events: list[Event] = []
        self._next_position = log.head() + 1
        self.records: list[Recorded] = []

    def version(self, stream: str) -> int:
        v = self._versions.get(stream)
        if v is None:
            v = self._cache.get(stream)
            if v is None:
                v = self.log.stream_version(stream)
            self._versions[stream] = v
        return v

    def learn_version(self, stream: str, version: int) -> None:
        """A version just read in this transaction (after `flush`, under the write
        lock, so it is current): spares `version` its lookup."""
        self._versions.setdefault(stream, version)

    @property
    def versions(self) -> dict[str, int]:
        return self._versions

    def prefetch_versions(self, streams: Iterable[str]) -> None:
        """Look up the versions of many streams in one query (a batch of appends).

        Streams already known (written in this batch, or cached) are left to
        `version`, which finds them without a query."""
        versions, cache = self._versions, self._cache
        missing = list({s for s in streams if s not in cache and s not in versions})
        for i in range(0, len(missing), 20000):
            chunk = missing[i : i + 20000]
            for s in chunk:
                versions[s] = 0
            rows = self.log.conn.execute(
                "SELECT stream, max(version) FROM events "
                "WHERE stream IN (SELECT value FROM json_each(?)) GROUP BY stream",
                (json.dumps(chunk),),
            )
            versions.update(rows)

    def append(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        """Check every request's expected version, then stage all or none of them."""
        staged: dict[str, int] = {}
        for req in requests:
            actual = staged.get(req.stream)
            if actual is None:
                actual = self.version(req.stream)
            if req.expected_version is not None and req.expected_version != actual:
                raise ConcurrencyError(req.stream, req.expected_version, actual)
            staged[req.stream] = actual + len(req.events)
        encode = self.log.codec.encode
        encoded = [[encode(event) for event in req.events] for req in requests]
        rows, now = self._rows, self.now
        results = []
        for req, coded in zip(requests, encoded):
            stream = req.stream
            version = self._versions[stream]
            first = self._next_position
            for type_, tv, data in coded:
                version += 1
                rows.append((stream, version, type_, tv, data, now))
            self._events.extend(req.events)
            self._next_position += len(coded)
            self._versions[stream] = version
            results.append(AppendResult(stream, first, self._next_position - 1, version))
        return results

    def append_each(self, requests: Iterable[Any]) -> None:
        """Stage many callers' appends, each all or none and independently of the others.

        Each item has `payload` (a list of `AppendRequest`) and gets `result` (their
        `AppendResult`s) or `error` (a `ConcurrencyError`, or why its events could not
        be encoded). The store's writer calls this with a whole batch: the common
        single-request single-event append is written out here, one loop for all.
        """
        versions, cache, rows, staged = self._versions, self._cache, self._rows, self._events
        encode = self.log.codec.encode
        now = self.now
        # In stream order: the rows then go into the (stream, version) index in key
        # order, which costs SQLite a good part less than the same rows in random
        # order (fewer page visits while inserting, fewer pages to write at COMMIT).
        # Concurrent callers' requests have no order among themselves; a stream's
        # own requests keep theirs (the sort is stable).
        for item in sorted(requests, key=_first_stream):
            payload = item.payload
            if len(payload) != 1 or len(payload[0].events) != 1:
                try:
                    item.result = self.append(payload)
                except (StoreError, UserError, msgspec.EncodeError, TypeError) as exc:
                    item.error = exc
                continue
            req = payload[0]
            stream = req.stream
            version = versions.get(stream)
            if version is None:
                version = cache.get(stream)
                if version is None:
                    version = self.version(stream)
            expected = req.expected_version
            if expected is not None and expected != version:
                item.error = ConcurrencyError(stream, expected, version)
                continue
            event = req.events[0]
            try:
                type_, tv, data = encode(event)
            except (UserError, msgspec.EncodeError, TypeError) as exc:
                item.error = exc
                continue
            version += 1
            versions[stream] = version
            rows.append((stream, version, type_, tv, data, now))
            staged.append(event)
            position = self._next_position
            self._next_position = position + 1
            item.result = [AppendResult(stream, position, position, version)]

    def flush(self) -> None:
        """Insert the staged rows so that SQL run next in the transaction sees them."""
        if not self._rows:
            return
        conn = self.log.conn
        first = self._next_position - len(self._rows)
        try:
            conn.executemany(_INSERT, self._rows)
        except sqlite3.Error as exc:
            raise translate_error(exc, self.log.path) from None
        last = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
        if last != self._next_position - 1:  # pragma: no cover - would mean a gap
            raise StoreError(f"position mismatch: expected {self._next_position - 1}, got {last}")
        if self.log.inline:
            records = [
                Recorded(first + i, r[0], r[1], r[2], e, r[5])
                for i, (r, e) in enumerate(zip(self._rows, self._events))
            ]
            for apply in self.log.inline:
                apply(conn, records)
            self.records.extend(records)
        self._rows.clear()
        self._events.clear()

    def mark(self) -> tuple[dict[str, int], int, int]:
        """A point to return to if a savepoint is rolled back (call after `flush`)."""
        return dict(self._versions), self._next_position, len(self.records)

    def restore(self, mark: tuple[dict[str, int], int, int]) -> None:
        self._versions, self._next_position, n_records = dict(mark[0]), mark[1], mark[2]
        self._rows.clear()
        self._events.clear()
        del self.records[n_records:]

    def finish(self) -> None:
        self.flush()
