"""The synchronous core of the SQLite event log: appends and reads.

`SQLiteLog` is plain blocking sqlite3. The async store (`sqlite.py`) runs it in
worker threads and adds group commit and subscriptions; the CLI's read commands
and the eventsourcing recorder facade use it directly.

Positions are the rowids of a table without AUTOINCREMENT, numbered from
`max(position) + 1` by one writer at a time (the database write lock), so they
are gap-free and in commit order: a rolled-back insert gives its rowid back.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from gormes.errors import StoreReadOnly
from gormes.events import log_sql
from gormes.events.base import Event
from gormes.events.codec import Codec, default_codec
from gormes.events.log_base import LogBase
from gormes.events.postgres_sql import SQLITE
from gormes.events.sqlite_schema import (
    VERSION_CACHE_MAX,
    connect,
    default_durability,
    translate_error,
)
from gormes.events.store import AppendRequest, AppendResult, InlineApply
from gormes.events.write_batch import Mark, WriteBatchBase

_INSERT_INTO = "INSERT INTO events(position, stream, version, type, type_version, data, recorded_at) VALUES "
# Rows go in with one statement per chunk, not `executemany`: sqlite3 lets go of
# the GIL around each statement's step, and each row of an executemany is a step.
# The writer's thread commits while the loop steps the runs, and each time it
# wants the GIL back it waits for the loop's switch interval (decision 0052).
# Chunks hold CHUNK rows, the rest goes in chunks of powers of two, so that the
# connection's statement cache holds at most nine of these statements.
CHUNK = 256


def _insert_sql(rows: int) -> str:
    return _INSERT_INTO + ",".join(["(?,?,?,?,?,?,?)"] * rows)


_INSERTS = {n: _insert_sql(n) for n in (CHUNK, *(1 << i for i in range(CHUNK.bit_length() - 1)))}


def _chunks(n: int) -> list[int]:
    """The chunk sizes `n` rows go in with: CHUNK as often as it fits, then powers of two."""
    sizes = [CHUNK] * (n // CHUNK)
    rest = n % CHUNK
    sizes.extend(1 << i for i in range(rest.bit_length() - 1, -1, -1) if rest >> i & 1)
    return sizes

T = TypeVar("T")

# Read at BEGIN: whether another connection committed, and the head to number from.
_BEGUN = f"SELECT data_version, ({log_sql.HEAD}) FROM pragma_data_version"


class SQLiteLog(LogBase):
    """Blocking access to one gormes database through one connection (its reads
    are `LogBase`'s)."""

    dialect = SQLITE

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
        self.head_at_begin = 0  # the head read by the last `begin`

    def close(self) -> None:
        self.conn.close()

    def reader(self) -> SQLiteLog:
        """Another connection to the same file, for reads from another thread."""
        return SQLiteLog(
            self.path, readonly=self.readonly, create=False,
            durability=self.durability, codec=self.codec, clock=self.clock,
        )

    @property
    def sql(self) -> sqlite3.Connection:
        """The connection `?` SQL runs on (see `LogBase`): on SQLite, `conn` itself."""
        return self.conn

    def first_nul_name(self, after: int, upto: int) -> tuple[int, str] | None:
        """The first event in (after, upto] whose stream or type holds U+0000 (NUL),
        and which of the two; None if none does. SQLite's text holds NUL and
        PostgreSQL's cannot (decision 0078). Compared as bytes: SQLite's text
        functions may stop at a NUL."""
        row = self.conn.execute(
            "SELECT position, instr(CAST(stream AS BLOB), x'00') > 0 FROM events"
            " WHERE position > ? AND position <= ?"
            " AND (instr(CAST(stream AS BLOB), x'00') > 0 OR instr(CAST(type AS BLOB), x'00') > 0)"
            " ORDER BY position LIMIT 1",
            (after, upto),
        ).fetchone()
        return None if row is None else (row[0], "stream" if row[1] else "type")

    # -- writes -------------------------------------------------------------

    def begin(self) -> None:
        if self.readonly:
            raise StoreReadOnly(f"{self.path} is read-only: cannot write events")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            # one statement for both: each is a GIL handoff for the writer's thread
            data_version, self.head_at_begin = self.conn.execute(_BEGUN).fetchone()
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

    def write_now(self, fn: Callable[[WriteBatch], T]) -> T:
        """`fn(batch)` in a write transaction of its own (no group commit), committed
        if it returns and rolled back if it raises: for scripts, tests and imports."""
        self.begin()
        try:
            batch = WriteBatch(self)
            result = fn(batch)
            batch.finish()
        except BaseException:
            self.rollback()
            raise
        self.commit(batch.versions)
        return result

    def append_now(
        self, stream: str, events: Sequence[Event], expected_version: int | None = None
    ) -> AppendResult:
        """Append in a transaction of its own (no group commit): for scripts and tests."""
        return self.write_now(
            lambda batch: batch.append([AppendRequest(stream, events, expected_version)])[0]
        )


class WriteBatch(WriteBatchBase):
    """The writes of one SQLite transaction (see `WriteBatchBase`): the staged rows
    go in with an INSERT per chunk (`_chunks`); positions are the rowids they are given."""

    log: SQLiteLog

    def __init__(self, log: SQLiteLog) -> None:
        # numbered from the head `begin` read under the write lock (WriteBatch follows a begin)
        super().__init__(log, log.head_at_begin, inline=log.inline, cache=log.version_cache)
        self._deferred: Mark | None = None  # a savepoint not sent yet (`defer_savepoint`)
        self.savepoint_sent = False
        self.types_inserted: set[str] = set()  # (a savepoint undone may leave some that are not)

    def defer_savepoint(self) -> Mark:
        """Mark a savepoint whose SAVEPOINT is sent only when SQL is about to run in
        it (a read, `execute`, a flush): a transact function that only appends
        (an audit record, a job's token count) then costs no statement of its own,
        and its rows go in with the batch's next INSERT. With inline projections
        their statements for those rows then run at that INSERT, outside the
        savepoint: harmless, since the savepoint only ever undoes a function that
        raised, and the rows of one that raised are dropped before any INSERT
        (`restore`). What it changes is whose request fails if an inline
        projection itself fails on them: that INSERT's, or the whole batch at
        COMMIT, as for a plain append's rows."""
        mark = self._deferred = self.mark()
        self.savepoint_sent = False
        return mark

    def send_pending(self) -> None:
        """The deferred SAVEPOINT, after the rows staged before it."""
        mark = self._deferred
        if mark is None:
            return
        self._deferred = None
        if mark.rows:
            self._insert(mark.rows)
        self.log.conn.execute("SAVEPOINT transact")
        self.savepoint_sent = True

    def read(self, then: Callable[[], T], streams: Iterable[str]) -> T:
        """A read of streams with nothing staged runs as it is: what is staged
        cannot change its answer. Otherwise it needs no savepoint of its own:
        with one deferred and nothing staged since it, the rows staged before it
        go in and the SAVEPOINT stays unsent (a transact function that reads,
        then appends, sends none)."""
        if self._staged_streams.isdisjoint(streams):
            return then()
        mark = self._deferred
        if mark is None or len(self._rows) > mark.rows:
            return self.flush(then)  # type: ignore[return-value]
        if self._rows:
            self._insert(len(self._rows))
        return then()

    def end_deferred(self) -> None:
        self._deferred = None

    def flush(self, then: Callable[[], T] | None = None) -> T | None:
        self.send_pending()
        if self._rows:
            self._insert(len(self._rows))
        return None if then is None else then()

    def _insert(self, n: int) -> None:
        """Insert the first `n` staged rows (and run the inline projections on them)."""
        conn = self.log.conn
        rows = self._rows if n == len(self._rows) else self._rows[:n]
        # Each row names its position, so the rowids are those or the INSERT fails
        # (a position taken): there is no rowid to check afterwards.
        try:
            start = 0
            for size in _chunks(len(rows)):
                end = start + size
                conn.execute(_INSERTS[size], [value for row in rows[start:end] for value in row])
                start = end
        except sqlite3.Error as exc:
            raise translate_error(exc, self.log.path) from None
        self.types_inserted.update(row[3] for row in rows)
        if self.inline:
            records = self.staged_records()
            if n < len(records):
                records = records[:n]
            for apply in self.inline:
                apply(conn, records)
        if n == len(self._rows):
            self.clear_staged()
        else:
            del self._rows[:n]
            del self._events[:n]
            mark = self._mark
            while mark is not None:  # what was staged before them is sent now
                mark.rows = max(0, mark.rows - n)
                mark = mark.outer
