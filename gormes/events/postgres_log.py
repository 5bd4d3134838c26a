"""The synchronous core of the PostgreSQL event log: reads, and one writer's batch.

`PostgresLog` wraps one psycopg connection (autocommit; transactions are opened
explicitly). The async store (`postgres.py`) runs it in worker threads.

Positions are gap-free and in commit order because every writing transaction
first takes `LOCK TABLE events IN EXCLUSIVE MODE` (the discipline of the
eventsourcing library's Postgres recorder), then numbers its rows from
`max(position) + 1`. The lock is held to COMMIT, and PostgreSQL makes a commit
visible before it releases its locks, so the next writer starts after the last
one is visible: a reader's snapshot always holds a prefix of positions. Unlike a
`bigserial`, a rolled-back transaction gives its numbers back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg

from gormes.errors import ConcurrencyError
from gormes.events.base import Recorded
from gormes.events.codec import Codec, default_codec
from gormes.events.postgres_schema import glob_regex, is_connection_lost
from gormes.events.postgres_sql import PortableConnection
from gormes.events.store import AppendRequest, AppendResult

COLUMNS = "position, stream, version, type, type_version, data, recorded_at"
_INSERT = (
    "INSERT INTO events(position, stream, version, type, type_version, data, recorded_at) "
    "SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::text[], "
    "%s::int[], %s::text[], %s::float8[])"
)

_HEAD = "SELECT coalesce(max(position), 0) FROM events"

T = TypeVar("T")

Row = tuple[int, str, int, str, int, str, float]
# An inline projection (the job ledger): called with the transaction's connection
# (a PortableConnection) and the records just inserted, inside the write transaction.
InlineApply = Callable[[PortableConnection, list[Recorded]], None]


@contextmanager
def pipeline(conn: psycopg.Connection) -> Iterator[psycopg.Pipeline]:
    """`conn.pipeline()`, except when the connection is lost in it (an error the
    server did not report, no SQLSTATE, or one `is_connection_lost` knows): then
    the connection is closed at once, without trying to leave pipeline mode
    (psycopg would fail to, and log it), so that the caller sees it lost and the
    batch's outcome is asked of the server (`pg_xact_status`)."""

    def lost(exc: BaseException) -> bool:
        return isinstance(exc, psycopg.Error) and (
            exc.sqlstate is None or is_connection_lost(exc, conn)
        )

    cm = conn.pipeline()
    p = cm.__enter__()
    try:
        yield p
    except BaseException as exc:
        if lost(exc):
            conn.close()
            try:  # ended as if the block had not raised: psycopg logs nothing then
                cm.__exit__(None, None, None)
            except psycopg.Error:
                pass
            raise
        if not cm.__exit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        try:
            cm.__exit__(None, None, None)
        except BaseException as exc:
            if lost(exc):
                conn.close()
            raise


class _PipelinedCursor:
    """A cursor of a statement sent in a pipeline: reading anything of it (its
    rowcount included, which psycopg would give as -1 before the answer came)
    first waits for the answers."""

    def __init__(self, cursor: psycopg.Cursor, pipeline: psycopg.Pipeline) -> None:
        self._cursor = cursor
        self._pipeline = pipeline

    def __getattr__(self, name: str) -> Any:
        if self._cursor.pgresult is None:
            self._pipeline.sync()
        return getattr(self._cursor, name)

    def __iter__(self) -> Any:
        return iter(self.fetchall())


class PipelinedConnection:
    """The write transaction's `PortableConnection` while a pipeline is open: the
    inline projections' statements are queued, not answered one by one."""

    dialect = PortableConnection.dialect

    def __init__(self, conn: PortableConnection, pipeline: psycopg.Pipeline) -> None:
        self._conn = conn
        self._pipeline = pipeline

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _PipelinedCursor:
        return _PipelinedCursor(self._conn.execute(sql, params), self._pipeline)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def pattern_clause(column: str, patterns: Sequence[str], params: list[Any]) -> str:
    """`column` equal to one of the names, or matching one of the GLOB patterns."""
    clauses = []
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            clauses.append(f"{column} ~ %s")
            params.append(glob_regex(pattern))
        else:
            clauses.append(f"{column} = %s")
            params.append(pattern)
    return "(" + " OR ".join(clauses) + ")"


class PostgresLog:
    """Blocking reads (and, for the writer, writes) through one connection."""

    def __init__(
        self,
        conn: psycopg.Connection,
        *,
        codec: Codec = default_codec,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.conn = conn
        # The same connection for SQL written in SQLite's dialect (read models).
        self.sql = PortableConnection(conn)
        self.codec = codec
        self.clock = clock

    def close(self) -> None:
        self.conn.close()

    # -- reads --------------------------------------------------------------

    def head(self) -> int:
        return self.conn.execute(_HEAD).fetchone()[0]

    def count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM events").fetchone()[0]

    def stream_version(self, stream: str) -> int:
        return self.conn.execute(
            "SELECT coalesce(max(version), 0) FROM events WHERE stream = %s", (stream,)
        ).fetchone()[0]

    def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        rows = self.conn.execute(
            f"SELECT {COLUMNS} FROM events WHERE stream = %s AND version > %s ORDER BY version",
            (stream, after_version),
        ).fetchall()
        return self.decode(rows)

    def read_streams(self, streams: Iterable[str]) -> dict[str, list[Recorded]]:
        """Several whole streams in one query: {stream: its events in version order}
        (an empty list for a stream with no events)."""
        wanted = list(dict.fromkeys(streams))
        out: dict[str, list[Recorded]] = {stream: [] for stream in wanted}
        if not wanted:
            return out
        rows = self.conn.execute(
            f"SELECT {COLUMNS} FROM events WHERE stream = ANY(%s) ORDER BY stream, version",
            (wanted,),
        ).fetchall()
        for record in self.decode(rows):
            out[record.stream].append(record)
        return out

    def select_rows(
        self,
        after: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        *,
        streams: Sequence[str] | None = None,
        upto: int | None = None,
    ) -> list[Row]:
        sql = f"SELECT {COLUMNS} FROM events WHERE position > %s"
        params: list[Any] = [after]
        if upto is not None:
            sql += " AND position <= %s"
            params.append(upto)
        if types:
            sql += " AND " + pattern_clause("type", types, params)
        if streams:
            sql += " AND " + pattern_clause("stream", streams, params)
        sql += " ORDER BY position"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        return self.conn.execute(sql, params).fetchall()

    def read_all(
        self,
        after_position: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        *,
        streams: Sequence[str] | None = None,
        upto: int | None = None,
    ) -> list[Recorded]:
        return self.decode(
            self.select_rows(after_position, limit, types, streams=streams, upto=upto)
        )

    def read_page(
        self, after_position: int, limit: int, types: Sequence[str] | None = None
    ) -> tuple[list[Recorded], int, int]:
        """(events, scanned up to, head), all from one snapshot (see SQLiteLog.read_page)."""
        conn = self.conn
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            head = self.head()
            upto = min(head, after_position + limit) if types else head
            rows = self.select_rows(after_position, limit, types, upto=upto)
        finally:
            if not conn.closed:
                conn.execute("COMMIT")
        scanned = rows[-1][0] if len(rows) == limit else max(upto, after_position)
        return self.decode(rows), scanned, head

    def decode(self, rows: Iterable[Row]) -> list[Recorded]:
        decode = self.codec.decode
        return [
            Recorded(pos, stream, version, type_, decode(type_, tv, data), at)
            for pos, stream, version, type_, tv, data, at in rows
        ]

    # -- writes -------------------------------------------------------------

    def begin_write(self) -> tuple[int, int]:
        """Open a write transaction holding the table lock; (its xid, the head).

        One round trip (a pipeline): the head is read after the lock is granted,
        since each statement of the pipeline runs only after the previous one
        ended; the xid is known to the caller only once all of it answered (if
        the connection drops before, nothing of the transaction can commit)."""
        conn = self.conn
        with pipeline(conn):
            conn.execute("BEGIN")
            xid = conn.execute("SELECT pg_current_xact_id()::text")
            conn.execute("LOCK TABLE events IN EXCLUSIVE MODE")
            head = conn.execute(_HEAD)
        return int(xid.fetchone()[0]), head.fetchone()[0]

    def xact_status(self, xid: int) -> str | None:
        """'committed', 'aborted', 'in progress', or None (too old to know)."""
        return self.conn.execute("SELECT pg_xact_status(%s::text::xid8)", (str(xid),)).fetchone()[0]


class PostgresWriteBatch:
    """The writes of one transaction: many callers' appends, checked and inserted.

    Versions are read under the table lock (no other writer can move them), once
    per stream per batch, and kept current as rows are staged.
    """

    def __init__(
        self, log: PostgresLog, head: int, inline: Sequence[InlineApply] = ()
    ) -> None:
        self.log = log
        self.now = log.clock()
        self.inline = inline
        self._versions: dict[str, int] = {}
        self._rows: list[Row] = []
        self._events: list[Any] = []  # the event of each staged row (None: decode it)
        self._next_position = head + 1
        # Statements whose answer nobody reads (SAVEPOINT, RELEASE): sent ahead of
        # the next statement, in the same round trip (see `defer`).
        self._pending: list[str] = []

    @property
    def versions(self) -> dict[str, int]:
        return self._versions

    def version(self, stream: str) -> int:
        v = self._versions.get(stream)
        if v is None:
            v = self._versions[stream] = self.log.stream_version(stream)
        return v

    def learn_version(self, stream: str, version: int) -> None:
        """A version just read in this transaction (after `flush`, under the table
        lock, so it is current): spares `version` its lookup."""
        self._versions.setdefault(stream, version)

    def prefetch_versions(self, streams: Iterable[str]) -> None:
        missing = sorted({s for s in streams if s not in self._versions})
        if not missing:
            return
        for s in missing:
            self._versions[s] = 0
        rows = self.log.conn.execute(
            "SELECT stream, max(version) FROM events WHERE stream = ANY(%s) GROUP BY stream",
            (missing,),
        )
        self._versions.update(rows)

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
        # every event encoded before any is staged: one that cannot be fails the call alone
        encoded = [[encode(event) for event in req.events] for req in requests]
        results = []
        for req, coded in zip(requests, encoded):
            version = self._versions[req.stream]
            first = self._next_position
            for event, (type_, tv, data) in zip(req.events, coded):
                version += 1
                self._rows.append((self._next_position, req.stream, version, type_, tv, data, self.now))
                self._events.append(event)
                self._next_position += 1
            self._versions[req.stream] = version
            results.append(AppendResult(req.stream, first, self._next_position - 1, version))
        return results

    def append_rows(self, rows: Sequence[Row]) -> None:
        """Stage stored rows as they are (a migration), at the positions they carry."""
        self._rows.extend(rows)
        self._events.extend([None] * len(rows))
        if rows:
            self._next_position = rows[-1][0] + 1

    def defer(self, sql: str) -> None:
        """Send `sql` (no parameters, no answer read) ahead of the next statement:
        it is queued in program order, before rows staged after it."""
        assert not self._rows, "defer only with nothing staged"
        self._pending.append(sql)

    def undefer(self, sql: str) -> bool:
        """Take back `sql` if it is the last statement deferred and not yet sent."""
        if self._pending and self._pending[-1] == sql:
            self._pending.pop()
            return True
        return False

    def send_pending(self) -> None:
        """Send the deferred statements now (before SQL run past this batch)."""
        if self._pending:
            self.flush()

    def flush(self, then: Callable[[], T] | None = None, *, force: bool = False) -> T | None:
        """Insert the staged rows so that SQL run next in the transaction sees them.

        The deferred statements, the INSERT, the inline projections' statements
        and `then` (SQL of the caller, whose result it returns) go in one
        pipeline: a round trip only where an answer is read (a SELECT), not one
        per statement. Errors are raised as without a pipeline (at the latest
        when it ends); statements after a failed one are not run. `force`:
        `then` is pipelined even when nothing is staged (several statements)."""
        conn = self.log.conn
        if not self._rows and not self._pending and not force:
            return None if then is None else then()
        with pipeline(conn) as pipe:
            pending, self._pending = self._pending, []
            for sql in pending:
                conn.execute(sql)
            if self._rows:
                columns = list(zip(*self._rows))
                conn.execute(_INSERT, [list(c) for c in columns])
                if self.inline:
                    decode = self.log.codec.decode
                    records = [
                        Recorded(pos, stream, version, type_,
                                 decode(type_, tv, data) if event is None else event, at)
                        for (pos, stream, version, type_, tv, data, at), event
                        in zip(self._rows, self._events)
                    ]
                    sql = PipelinedConnection(self.log.sql, pipe)
                    for apply in self.inline:
                        apply(sql, records)
                self._rows.clear()
                self._events.clear()
            result = None if then is None else then()
        return result

    def mark(self) -> tuple[dict[str, int], int]:
        """A point to return to if a savepoint is rolled back (call after `flush`)."""
        return dict(self._versions), self._next_position

    def restore(self, mark: tuple[dict[str, int], int]) -> None:
        self._versions, self._next_position = dict(mark[0]), mark[1]
        self._rows.clear()
        self._events.clear()
