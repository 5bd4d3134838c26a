"""What the runner records about each projection, beside its own tables.

- `tracking` (made by the event store): how far each projection has applied the log.
- `projection_versions`: the code version that built a projection's tables; a
  different version in the code means the tables are rebuilt from position 0.
- `projection_failures`: batches that failed to apply. A failure stays open until
  a later batch applies past it (or a rebuild starts over), so the doctor and
  `gormes projections status` can report it.

Plain blocking functions over one connection: the runner calls them inside its
transactions, the CLI's status reads them directly. The connection is an sqlite3
one or, on PostgreSQL, a PortableConnection (gormes/events/postgres_sql.py): the
SQL is one text with `?` placeholders; only creating the tables and asking the
catalog differ.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

from gormes.events.postgres_sql import POSTGRES, dialect_of

VERSIONS = "projection_versions"
FAILURES = "projection_failures"


class ProjectionStatus(msgspec.Struct, frozen=True):
    name: str
    version: int  # the version this code builds
    built_version: int | None  # the version that built the tables (None: never built)
    position: int  # last event applied
    head: int  # last event in the log
    lag: int
    failures: int  # failed batches not applied since
    last_error: str | None
    state: str  # "ok", "behind", "failing", "stale" (version changed) or "not built"


def ensure_tables(conn: sqlite3.Connection) -> None:
    """Create the bookkeeping tables if missing (safe inside an open transaction)."""
    if dialect_of(conn) == POSTGRES:
        from gormes.projections.ledger_postgres import ensure_bookkeeping

        ensure_bookkeeping(conn)
        return
    import sqlite_utils

    db = sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
    db.table(VERSIONS).create(
        {"projection": str, "version": int}, pk="projection", not_null={"version"},
        if_not_exists=True,
    )
    db.table(FAILURES).create(
        {
            "id": int,
            "projection": str,
            "version": int,
            "first_position": int,
            "last_position": int,
            "error": str,
            "failed_at": float,
            "resolved_at": float,
        },
        pk="id",
        not_null={"projection", "first_position", "last_position", "error", "failed_at"},
        if_not_exists=True,
    )
    db.table(FAILURES).create_index(["projection", "resolved_at"], if_not_exists=True)


def tracked_position(conn: sqlite3.Connection, name: str) -> int:
    row = conn.execute("SELECT position FROM tracking WHERE projection = ?", (name,)).fetchone()
    return row[0] if row else 0


def set_position(conn: sqlite3.Connection, name: str, position: int) -> None:
    conn.execute(
        "INSERT INTO tracking(projection, position) VALUES (?, ?) "
        "ON CONFLICT(projection) DO UPDATE SET position = excluded.position",
        (name, position),
    )


def built_version(conn: sqlite3.Connection, name: str) -> int | None:
    if not has_table(conn, VERSIONS):
        return None
    row = conn.execute(f"SELECT version FROM {VERSIONS} WHERE projection = ?", (name,)).fetchone()
    return row[0] if row else None


def set_built_version(conn: sqlite3.Connection, name: str, version: int) -> None:
    conn.execute(
        f"INSERT INTO {VERSIONS}(projection, version) VALUES (?, ?) "
        "ON CONFLICT(projection) DO UPDATE SET version = excluded.version",
        (name, version),
    )


def record_failure(
    conn: sqlite3.Connection,
    name: str,
    version: int,
    first_position: int,
    last_position: int,
    error: str,
    now: float,
) -> None:
    """Record a failed batch; the same failure again only updates its time."""
    again = conn.execute(
        f"UPDATE {FAILURES} SET failed_at = ? WHERE projection = ? AND resolved_at IS NULL "
        "AND first_position = ? AND last_position = ? AND error = ?",
        (now, name, first_position, last_position, error),
    )
    if again.rowcount:
        return
    conn.execute(
        f"INSERT INTO {FAILURES}(projection, version, first_position, last_position, "
        "error, failed_at) VALUES (?, ?, ?, ?, ?, ?)",
        (name, version, first_position, last_position, error, now),
    )


def resolve_failures(
    conn: sqlite3.Connection, name: str, now: float, applied_upto: int | None = None
) -> None:
    """Close the open failures that `applied_upto` moved past (all of them if None)."""
    sql = f"UPDATE {FAILURES} SET resolved_at = ? WHERE projection = ? AND resolved_at IS NULL"
    params: list[object] = [now, name]
    if applied_upto is not None:
        sql += " AND first_position <= ?"
        params.append(applied_upto)
    conn.execute(sql, params)


def open_failures(conn: sqlite3.Connection, name: str) -> tuple[int, str | None]:
    """(number of open failures, the latest one's error)."""
    if not has_table(conn, FAILURES):
        return 0, None
    rows = conn.execute(
        f"SELECT error FROM {FAILURES} WHERE projection = ? AND resolved_at IS NULL "
        "ORDER BY id DESC",
        (name,),
    ).fetchall()
    return len(rows), (rows[0][0] if rows else None)


def read_status(
    conn: sqlite3.Connection, projections: Sequence[tuple[str, int]]
) -> list[ProjectionStatus]:
    """The status of each (name, code version), read in one snapshot."""
    # One snapshot: on PostgreSQL a plain BEGIN is READ COMMITTED (a snapshot per
    # statement), so ask for REPEATABLE READ.
    postgres = dialect_of(conn) == POSTGRES
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if postgres else "BEGIN")
    try:
        head = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
        statuses = []
        for name, version in projections:
            built = built_version(conn, name)
            position = tracked_position(conn, name)
            failures, last_error = open_failures(conn, name)
            statuses.append(
                ProjectionStatus(
                    name=name,
                    version=version,
                    built_version=built,
                    position=position,
                    head=head,
                    lag=head - position,
                    failures=failures,
                    last_error=last_error,
                    state=_state(built, version, position, head, failures),
                )
            )
    finally:
        conn.execute("COMMIT")
    return statuses


def _state(built: int | None, version: int, position: int, head: int, failures: int) -> str:
    if built is None:
        return "not built"
    if built != version:
        return "stale"
    if failures:
        return "failing"
    return "behind" if position < head else "ok"


def has_tables(conn: sqlite3.Connection, names: Sequence[str]) -> bool:
    """Whether `conn`'s database has every table of `names` (distinct), in one catalog read."""
    marks = ", ".join("?" * len(names))
    if dialect_of(conn) == POSTGRES:
        sql = ("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
               f" WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname IN ({marks})")
    else:
        sql = f"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ({marks})"
    return bool(conn.execute(sql, tuple(names)).fetchone()[0] == len(names))


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    """Whether `conn`'s database (SQLite, or PostgreSQL's current schema) has table `name`."""
    if dialect_of(conn) == POSTGRES:
        row = conn.execute(
            "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relname = ? AND c.relkind = 'r'",
            (name,),
        ).fetchone()
        return row is not None
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None
