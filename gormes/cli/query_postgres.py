"""`gormes query SQL` on PostgreSQL: the server keeps it read-only.

The statement runs on a session that logs in as a read-only role (decision
0017, gormes/events/postgres_reader.py): never as a superuser or any role that
could reach the server's programs, files or other sessions, or write the
schema's tables, since such a role's SQL can undo any `SET ROLE` it is given.

On that session it runs alone in a `READ ONLY` transaction that is always
rolled back, with the session's `default_transaction_read_only` on:

- PostgreSQL refuses every write in it (INSERT, UPDATE, DELETE, DDL, temporary
  tables, `nextval`, `SELECT ... FOR UPDATE`) with SQLSTATE 25006, and the
  reader's lack of privilege refuses the rest (`COPY ... TO PROGRAM`,
  `pg_read_file`, `LOCK TABLE`, `SET ROLE`, `pg_terminate_backend`) with 42501;
- `statement_timeout` and `lock_timeout` are set for the transaction before the
  statement comes (`--timeout`): a `SET` inside the statement cannot lift the
  limit on the statement already running;
- the transaction has already read (`SELECT set_config(...)`) when the
  statement comes, so a `SET TRANSACTION READ WRITE` (or `SET
  transaction_read_only = off`) is refused too (25001);
- the statement is sent with the extended query protocol, which holds exactly
  one command: `SELECT 1; DELETE ...` is refused before anything runs;
- the transaction is rolled back, never committed: what a read may queue for
  commit (a `NOTIFY`) is dropped.

Each refusal is one line (`ReadOnlyQuery`, exit 2), as on SQLite. The rows are
streamed from the server a chunk at a time, as SQLite's cursor yields them, so
`--json` writes out a result larger than memory. The statement is executed once:
a result with no row takes its columns from the server's description of the
statement, not from running it again.
"""

from __future__ import annotations

import signal

import decimal
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from gormes.errors import QueryTimedOut, ReadOnlyQuery, UserError

READ_ONLY_STATES = ("25006", "25001")  # read_only_sql_transaction, active_sql_transaction
INSUFFICIENT_PRIVILEGE = "42501"
QUERY_CANCELED, LOCK_NOT_AVAILABLE = "57014", "55P03"
APPLICATION_NAME = "gormes query"
DEFAULT_TIMEOUT_S = 30.0
_PLAIN = (str, int, float, bool, bytes, list, dict, type(None))


def open_read_only(url: str) -> psycopg.Connection:
    """A session logged in as a reader of `url`'s existing gormes schema, every
    transaction of it READ ONLY (nothing is created but the reader role)."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.events import postgres_reader as reader
    from gormes.events.postgres_schema import connect, prepare, redact

    conn = connect(url, application_name=APPLICATION_NAME)
    try:
        schema = prepare(conn, url, create=False)
        why = reader.why_not_a_reader(conn, schema)
        if why is None:
            return _read_only(conn)
        if reader.named_reader() is None:
            if not reader.may_manage_roles(conn):
                raise reader.refuse_wide_role(why, redact(url))
            reader.ensure_reader(conn, schema)
    except BaseException:
        conn.close()
        raise
    conn.close()  # nothing the attacker writes runs on a wide role's session
    return _reader_session(url, schema)


def _reader_session(url: str, schema: str) -> psycopg.Connection:
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from psycopg import sql

    from gormes.errors import StoreError
    from gormes.events import postgres_reader as reader
    from gormes.events.postgres_schema import connect, prepare, redact

    where = reader.reader_conninfo(url)
    try:
        conn = connect(where, application_name=APPLICATION_NAME)
    except StoreError as exc:
        raise StoreError(f"{exc} ({reader.login_hint()})") from None
    try:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        why = reader.why_not_a_reader(conn, schema)
        if why is not None:
            raise reader.refuse_wide_role(why, redact(where))
        prepare(conn, where, create=False)
        return _read_only(conn)
    except BaseException:
        conn.close()
        raise


def _read_only(conn: psycopg.Connection) -> psycopg.Connection:
    conn.execute("SET default_transaction_read_only = on")
    return conn


@contextmanager
def run(
    conn: psycopg.Connection, sql: str, *, timeout: float = DEFAULT_TIMEOUT_S
) -> Iterator[tuple[list[str], Iterator[tuple[Any, ...]]]]:
    """(column names, the rows as the server sends them) of one statement, run
    once, in a READ ONLY transaction bounded by `timeout` seconds and rolled back
    when the block ends. Rows are streamed (`stream_rows`), so a result larger
    than memory can be written out."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.events.postgres_sql import stream_rows

    limit = f"{max(1, round(timeout * 1000))}ms"
    # Ctrl-C cancels the statement (psycopg cancels on KeyboardInterrupt) even when
    # this process inherited SIGINT ignored: Python then installs no handler of its own.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    conn.execute("BEGIN TRANSACTION READ ONLY")
    try:
        # Limits for this transaction only; reading them fixes its mode as well.
        conn.execute(
            "SELECT set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true)",
            (limit, limit),
        )
        cursor = conn.cursor()
        # The extended protocol holds exactly one command: `SELECT 1; DELETE ...` is
        # refused before anything runs; `%` is left alone (no parameters).
        rows = stream_rows(cursor, sql, None)
        with _translated(timeout):
            try:
                first = next(rows, _NO_ROW)
            except psycopg.ProgrammingError as exc:
                if exc.sqlstate is not None:
                    raise
                first = _NO_ROW  # a statement with no result (SET ...): no rows
        columns = [d.name for d in cursor.description or ()]
        if first is _NO_ROW and not columns:
            columns = _described_columns(conn)
        yield columns, _rows(first, rows, timeout)
    finally:
        signal.signal(signal.SIGINT, previous)
        if not conn.closed:
            conn.execute("ROLLBACK")


_NO_ROW = object()


def _described_columns(conn: psycopg.Connection) -> list[str]:
    """The columns of the statement just run, from the server's description of
    it (the unnamed statement the stream left), without running it again: a
    stream that ends with no row does not describe its columns."""
    described = conn.pgconn.describe_prepared(b"")
    if described.status != psycopg.pq.ExecStatus.COMMAND_OK:
        return []
    encoding = conn.info.encoding
    return [(described.fname(i) or b"").decode(encoding) for i in range(described.nfields)]


def _rows(first: Any, rows: Iterator[tuple[Any, ...]], timeout: float) -> Iterator[tuple[Any, ...]]:
    if first is _NO_ROW:
        return
    yield first
    with _translated(timeout):
        yield from rows


@contextmanager
def _translated(timeout: float) -> Iterator[None]:
    """psycopg's errors as one line: a refused write or server action
    (`ReadOnlyQuery`, exit 2), the time limit (`QueryTimedOut`, exit 1), or a
    failed query."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.events.postgres_schema import first_line

    try:
        yield
    except psycopg.Error as exc:
        if exc.sqlstate in READ_ONLY_STATES:
            raise ReadOnlyQuery(
                f"refused: the query would write ({first_line(exc)}); gormes query is read-only"
            ) from None
        if exc.sqlstate == INSUFFICIENT_PRIVILEGE:
            raise ReadOnlyQuery(
                f"refused: not for a reader ({first_line(exc)}); gormes query is read-only"
            ) from None
        if exc.sqlstate in (QUERY_CANCELED, LOCK_NOT_AVAILABLE):
            raise QueryTimedOut(
                f"query failed: timed out after {timeout:g} s (--timeout) ({first_line(exc)})"
            ) from None
        if exc.sqlstate == "42601" and "multiple commands" in str(exc):
            raise UserError(f"query failed: one statement at a time ({first_line(exc)})") from None
        raise UserError(f"query failed: {first_line(exc)}") from None


def json_rows(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> Iterator[dict[str, Any]]:
    """Rows as objects for `--json`: numerics as JSON numbers (as SQLite gives
    them), what msgspec encodes natively (times, UUIDs, jsonb) as it does, and
    any other PostgreSQL type as its text."""
    for row in rows:
        yield {column: _plain(value) for column, value in zip(columns, row)}


def _plain(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value == value.to_integral_value():
            return int(value)
        return float(value)
    if isinstance(value, _PLAIN):
        return value
    import datetime
    import uuid

    if isinstance(value, datetime.date | datetime.time | datetime.timedelta | uuid.UUID):
        return value
    return str(value)
