"""`gormes query SQL` on PostgreSQL: the server keeps it read-only.

The statement runs alone in a `READ ONLY` transaction that is always rolled
back, on a session whose `default_transaction_read_only` is on:

- PostgreSQL refuses every write in it (INSERT, UPDATE, DELETE, DDL, temporary
  tables, `nextval`, `SELECT ... FOR UPDATE`) with SQLSTATE 25006;
- the transaction has already read (`SELECT 1`) when the statement comes, so a
  `SET TRANSACTION READ WRITE` (or `SET transaction_read_only = off`) is refused
  too (25001);
- the statement is sent as a prepared statement, which holds exactly one
  command: `SELECT 1; DELETE ...` is refused before anything runs;
- the transaction is rolled back, never committed: what a read may queue for
  commit (a `NOTIFY`) is dropped.

Either refusal is one line (`ReadOnlyQuery`, exit 2), as on SQLite.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterator
from typing import Any

import psycopg

from gormes.errors import ReadOnlyQuery, UserError

READ_ONLY_STATES = ("25006", "25001")  # read_only_sql_transaction, active_sql_transaction
_PLAIN = (str, int, float, bool, bytes, list, dict, type(None))


def open_read_only(url: str) -> psycopg.Connection:
    """A read-only session on an existing gormes schema (nothing is created)."""
    from gormes.events.postgres_schema import connect_read_only

    return connect_read_only(url, application_name="gormes query")


def run(conn: psycopg.Connection, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """(column names, rows) of one statement, read in a READ ONLY transaction
    that is then rolled back."""
    from gormes.events.postgres_schema import first_line

    conn.execute("BEGIN TRANSACTION READ ONLY")
    try:
        conn.execute("SELECT 1")  # from here on the transaction's mode is fixed
        cursor = conn.execute(sql, None, prepare=True)  # one command, `%` left alone
        columns = [d.name for d in cursor.description or ()]
        rows = cursor.fetchall() if cursor.description else []
    except psycopg.Error as exc:
        if exc.sqlstate in READ_ONLY_STATES:
            raise ReadOnlyQuery(
                f"refused: the query would write ({first_line(exc)}); gormes query is read-only"
            ) from None
        if exc.sqlstate == "42601" and "multiple commands" in str(exc):
            raise UserError(f"query failed: one statement at a time ({first_line(exc)})") from None
        raise UserError(f"query failed: {first_line(exc)}") from None
    finally:
        if not conn.closed:
            conn.execute("ROLLBACK")
    return columns, rows


def json_rows(columns: list[str], rows: list[tuple[Any, ...]]) -> Iterator[dict[str, Any]]:
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
