"""A fold's state kept in the database, so the next reader goes on from its position.

One row per fold, `(name, position, state)` in a small table of its own, in the
SQLite file or the gormes schema of PostgreSQL (decision 0084):

    kept_fold.read(conn, "doctor_scan", "log")     # (position, state JSON) or None
    kept_fold.write(tx_or_conn, "doctor_scan", "log", position, state)
    kept_fold.save_apart(path_or_url, "doctor_scan", "log", position, state)  # True if kept

The doctor keeps its log summary so (gormes/health/scan.py, `doctor_scan`), and
the daemon its `/metrics` counters (gormes/telemetry/metrics.py, `metrics_fold`).
What is kept is only a shortcut: a table that is missing, that this session may
not read or write (a PostgreSQL role that may only read, a standby, a read-only
or locked file) means the reader folds from position 0 and the writer skips
(`read` gives None, `save_apart` False, `write` raises the database's error).

`?` SQL on an sqlite3 connection, a PortableConnection or a store transaction.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from gormes.errors import StoreError
from gormes.events.postgres_sql import POSTGRES, dialect_of

LOCK_TIMEOUT_S = 1.0  # a writer of its own waits this long for a lock, then skips

_DDL = "CREATE TABLE IF NOT EXISTS {table}(name TEXT PRIMARY KEY, position {integer}, state TEXT)"


def _errors(conn: Any) -> tuple[type[BaseException], ...]:
    if dialect_of(conn) == POSTGRES:
        # Lazy for start-up time: psycopg is loaded only on PostgreSQL (already, then).
        import psycopg

        return (psycopg.Error, StoreError)
    return (sqlite3.Error,)


def _exists(conn: Any, table: str, privilege: str | None = None) -> bool:
    """Whether `table` is there (on PostgreSQL: in the current schema, and, with
    `privilege`, whether this session holds it; NULL for no table reads as False)."""
    if dialect_of(conn) == POSTGRES:
        if privilege is None:
            return bool(conn.execute("SELECT to_regclass(?) IS NOT NULL", (table,)).fetchone()[0])
        row = conn.execute(f"SELECT has_table_privilege(to_regclass(?), '{privilege}')", (table,)).fetchone()
        return bool(row[0])
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
    return row is not None


def read(conn: Any, table: str, name: str) -> tuple[int, str] | None:
    """The kept position and state of fold `name`, or None (no table, no row, or
    not readable by this session)."""
    try:
        if not _exists(conn, table, "SELECT"):
            return None
        row = conn.execute(f"SELECT position, state FROM {table} WHERE name = ?", (name,)).fetchone()
    except _errors(conn):
        return None
    if row is None or row[0] is None or row[1] is None:
        return None
    return int(row[0]), str(row[1])


def write(conn: Any, table: str, name: str, position: int, state: str) -> None:
    """Keep fold `name` (in the caller's transaction); the table is made when it is
    missing (made only then: PostgreSQL checks the right to create in the schema
    before it sees the table is there, so a role that may write but not create
    could not even say IF NOT EXISTS)."""
    if not _exists(conn, table):
        integer = "BIGINT" if dialect_of(conn) == POSTGRES else "INTEGER"
        conn.execute(_DDL.format(table=table, integer=integer))
    conn.execute(
        f"INSERT INTO {table}(name, position, state) VALUES (?, ?, ?)"
        " ON CONFLICT(name) DO UPDATE SET position = excluded.position, state = excluded.state",
        (name, position, state),
    )


def save_apart(database: Path | str, table: str, name: str, position: int, state: str, *,
               application_name: str = "gormes") -> bool:
    """`write` on a connection of its own to `database` (an SQLite file or a
    PostgreSQL URL), committed at once; False when it cannot be written now."""
    from gormes.events.open import is_postgres_url  # open imports the stores: only when saving

    if is_postgres_url(database):
        return _save_postgres(str(database), table, name, position, state, application_name)
    try:
        conn = sqlite3.connect(database, timeout=LOCK_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error:
        return False
    try:
        write(conn, table, name, position, state)
        return True
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def _save_postgres(url: str, table: str, name: str, position: int, state: str, application_name: str) -> bool:
    # Lazy for start-up time: psycopg is loaded only for a PostgreSQL URL.
    import psycopg

    from gormes.events.postgres_schema import connect
    from gormes.events.postgres_sql import PortableConnection

    try:
        raw = connect(url, application_name=application_name)
    except StoreError:
        return False
    try:
        timeout = f"{int(LOCK_TIMEOUT_S * 1000)}ms"
        raw.execute("SELECT set_config('lock_timeout', %s, false), set_config('statement_timeout', %s, false)",
                    (timeout, "10s"))
        with raw.transaction():
            write(PortableConnection(raw), table, name, position, state)
        return True
    except psycopg.Error:
        return False
    finally:
        raw.close()
