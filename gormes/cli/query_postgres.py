"""`gormes query SQL` on PostgreSQL: the server keeps it read-only.

The statement runs alone in a `READ ONLY` transaction that is always rolled
back, on a session whose `default_transaction_read_only` is on:

- PostgreSQL refuses every write in it (INSERT, UPDATE, DELETE, DDL, temporary
  tables, `nextval`, `SELECT ... FOR UPDATE`) with SQLSTATE 25006;
- the transaction has already read (`SELECT 1`) when the statement comes, so a
  `SET TRANSACTION READ WRITE` (or `SET transaction_read_only = off`) is refused
  too (25001);
- the statement is sent with the extended query protocol, which holds exactly
  one command: `SELECT 1; DELETE ...` is refused before anything runs;
- the transaction is rolled back, never committed: what a read may queue for
  commit (a `NOTIFY`) is dropped.

Either refusal is one line (`ReadOnlyQuery`, exit 2), as on SQLite. The rows are
streamed from the server a chunk at a time, as SQLite's cursor yields them, so
`--json` writes out a result larger than memory.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from gormes.errors import ReadOnlyQuery, UserError

READ_ONLY_STATES = ("25006", "25001")  # read_only_sql_transaction, active_sql_transaction
_PLAIN = (str, int, float, bool, bytes, list, dict, type(None))


def open_read_only(url: str) -> psycopg.Connection:
    """A read-only session on an existing gormes schema (nothing is created)."""
    from gormes.events.postgres_schema import connect_read_only

    return connect_read_only(url, application_name="gormes query")


@contextmanager
def run(conn: psycopg.Connection, sql: str) -> Iterator[tuple[list[str], Iterator[tuple[Any, ...]]]]:
    """(column names, the rows as the server sends them) of one statement, in a
    READ ONLY transaction that is rolled back when the block ends. Rows are
    streamed (`stream_rows`), so a result larger than memory can be written out."""
    from gormes.events.postgres_sql import stream_rows

    conn.execute("BEGIN TRANSACTION READ ONLY")
    try:
        conn.execute("SELECT 1")  # from here on the transaction's mode is fixed
        cursor = conn.cursor()
        # The extended protocol holds exactly one command: `SELECT 1; DELETE ...` is
        # refused before anything runs; `%` is left alone (no parameters).
        rows = stream_rows(cursor, sql, None)
        with _translated():
            try:
                first = next(rows, _NO_ROW)
            except psycopg.ProgrammingError as exc:
                if exc.sqlstate is not None:
                    raise
                first = _NO_ROW  # a statement with no result (SET ...): no rows
            description = cursor.description
            if first is _NO_ROW and description is None:
                # A stream that ends with no row does not describe its columns: the
                # statement (read-only, rolled back) is run once more for them.
                description = _describe(conn, sql)
        yield [d.name for d in description or ()], _rows(first, rows)
    finally:
        if not conn.closed:
            conn.execute("ROLLBACK")


_NO_ROW = object()


def _describe(conn: psycopg.Connection, sql: str) -> Any:
    try:
        return conn.execute(sql, None, prepare=True).description
    except psycopg.ProgrammingError:
        return None


def _rows(first: Any, rows: Iterator[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    if first is _NO_ROW:
        return
    yield first
    with _translated():
        yield from rows


@contextmanager
def _translated() -> Iterator[None]:
    """psycopg's errors as one line: a refused write (`ReadOnlyQuery`, exit 2) or a
    failed query."""
    from gormes.events.postgres_schema import first_line

    try:
        yield
    except psycopg.Error as exc:
        if exc.sqlstate in READ_ONLY_STATES:
            raise ReadOnlyQuery(
                f"refused: the query would write ({first_line(exc)}); gormes query is read-only"
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
