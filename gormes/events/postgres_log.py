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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg

from gormes.events import log_sql
from gormes.events.codec import Codec, default_codec
from gormes.events.log_base import LogBase
from gormes.events.postgres_schema import is_connection_lost
from gormes.events.postgres_sql import POSTGRES, PortableConnection
from gormes.events.store import InlineApply
from gormes.events.write_batch import WriteBatchBase

# The rows go in as one array per column: one statement, however many rows.
_INSERT = (
    "INSERT INTO events(position, stream, version, type, type_version, data, recorded_at) "
    "SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::text[], "
    "%s::int[], %s::text[], %s::float8[])"
)

T = TypeVar("T")


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


class PostgresLog(LogBase):
    """Blocking reads (and, for the writer, writes) through one connection."""

    dialect = POSTGRES

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

    # -- reads (LogBase's, on `sql`) ----------------------------------------

    SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

    def _end_snapshot(self) -> None:
        if not self.conn.closed:
            self.conn.execute("COMMIT")

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
            head = conn.execute(log_sql.HEAD)
        return int(xid.fetchone()[0]), head.fetchone()[0]

    def xact_status(self, xid: int) -> str | None:
        """'committed', 'aborted', 'in progress', or None (too old to know)."""
        return self.conn.execute("SELECT pg_xact_status(%s::text::xid8)", (str(xid),)).fetchone()[0]


class PostgresWriteBatch(WriteBatchBase):
    """The writes of one PostgreSQL transaction (see `WriteBatchBase`).

    Versions are read under the table lock (no other writer can move them).
    Statements whose answer nobody reads (SAVEPOINT, RELEASE) are held back and
    sent ahead of the next statement, in the same round trip (`defer`).
    """

    log: PostgresLog

    def __init__(
        self, log: PostgresLog, head: int, inline: Sequence[InlineApply] = ()
    ) -> None:
        super().__init__(log, head, inline=inline)
        self._pending: list[str] = []

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
                    records = self.staged_records()
                    sql = PipelinedConnection(self.log.sql, pipe)
                    for apply in self.inline:
                        apply(sql, records)
                self.clear_staged()
            result = None if then is None else then()
        return result
