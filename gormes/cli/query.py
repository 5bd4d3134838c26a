"""`gormes query SQL`: read-only SQL against the database, bounded in time.

On PostgreSQL the server enforces it, on a session logged in as a read-only
role (gormes/cli/query_postgres.py). On SQLite three locks keep it read-only:
the file is opened with `mode=ro`, the connection has `PRAGMA query_only`, and
an authorizer allows only reads (SELECT, reading columns, functions, and pragmas
that only report), so a write statement is refused before it runs, with one line
naming what it would have done.

On both, the statement (with the streaming of its rows) is stopped after
`--timeout` seconds (`QueryTimedOut`, exit 1): a runaway read would otherwise
hold its snapshot, and on SQLite keep every checkpoint from resetting the WAL.
Ctrl-C stops it at once (exit 130): on SQLite a progress handler, called every
thousand virtual machine steps, ends the statement when SIGINT has come or
the time is up, since a statement inside SQLite's C code never returns to
Python to see a KeyboardInterrupt.
"""

from __future__ import annotations

import math
import signal
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

DEFAULT_TIMEOUT_S = 30.0
# PostgreSQL's limit on statement_timeout (milliseconds in a 32-bit integer).
MAX_TIMEOUT_S = 2_147_483.0
PROGRESS_STEPS = 1000

# Pragmas that take an argument yet only report (`PRAGMA table_info(events)`).
REPORTING_PRAGMAS = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
    "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check",
    "function_list", "pragma_list", "module_list", "collation_list", "database_list",
    "compile_options",
})

_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
            sqlite3.SQLITE_RECURSIVE}

# Pragmas that act even without an argument.
ACTING_PRAGMAS = frozenset({"wal_checkpoint", "optimize", "incremental_vacuum"})

_ACTION_NAMES = {
    getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ")
    for name in (
        "CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE",
        "CREATE_TEMP_TRIGGER", "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_VIEW",
        "DELETE", "DROP_INDEX", "DROP_TABLE", "DROP_TEMP_INDEX", "DROP_TEMP_TABLE",
        "DROP_TEMP_TRIGGER", "DROP_TEMP_VIEW", "DROP_TRIGGER", "DROP_VIEW", "INSERT",
        "TRANSACTION", "UPDATE", "ATTACH", "DETACH", "ALTER_TABLE", "REINDEX", "ANALYZE",
        "CREATE_VTABLE", "DROP_VTABLE", "SAVEPOINT",
    )
}


# What SQLite itself says when a write gets past the guard to the other locks.
_WRITE_REFUSALS = ("readonly", "read-only", "may not be modified")


class ReadOnlyGuard:
    """An sqlite3 authorizer that denies anything but reading, remembering why."""

    def __init__(self) -> None:
        self.refused: str | None = None

    def __call__(self, action: int, arg1, arg2, db_name, trigger) -> int:
        if action in _ALLOWED:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in REPORTING_PRAGMAS or (arg2 is None and name not in ACTING_PRAGMAS):
                return sqlite3.SQLITE_OK
            self.refused = f"PRAGMA {arg1}" + ("" if arg2 is None else f" = {arg2}")
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master" and trigger is None:
            # Asked when a table-valued function such as json_each is first used;
            # nothing is written. A real edit of the schema table needs
            # `PRAGMA writable_schema` (refused above) and the read-only connection.
            return sqlite3.SQLITE_OK
        if arg1 in ("sqlite_master", "sqlite_temp_master", "sqlite_schema"):
            self.refused = "a schema change"
        else:
            self.refused = _ACTION_NAMES.get(action, f"action {action}")
            if arg1:
                self.refused += f" {arg1}"
        return sqlite3.SQLITE_DENY


class Stopper:
    """An sqlite3 progress handler that ends the statement once `timeout` seconds
    have passed or SIGINT has come, remembering which."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.ends = time.monotonic() + timeout
        self.interrupted = False
        self.timed_out = False

    def __call__(self) -> int:
        if self.interrupted:
            return 1
        if time.monotonic() >= self.ends:
            self.timed_out = True
            return 1
        return 0

    def error(self) -> BaseException | None:
        """What the statement's "interrupted" error means, if this stopped it."""
        # Lazy for start-up time: loaded when the command runs, not for its --help.
        from gormes.errors import QueryTimedOut

        if self.interrupted:
            return click.exceptions.Abort()
        if self.timed_out:
            return QueryTimedOut(f"query failed: timed out after {self.timeout:g} s (--timeout)")
        return None


@contextmanager
def stoppable(conn: sqlite3.Connection, timeout: float) -> Iterator[Stopper]:
    """While the block runs, statements on `conn` end after `timeout` seconds or
    on SIGINT (the previous SIGINT handler is restored afterwards)."""
    stopper = Stopper(timeout)

    def on_sigint(signum, frame) -> None:
        stopper.interrupted = True
        conn.interrupt()

    conn.set_progress_handler(stopper, PROGRESS_STEPS)
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield stopper
    finally:
        signal.signal(signal.SIGINT, previous)
        conn.set_progress_handler(None, 0)


def open_read_only(path: Path) -> tuple[sqlite3.Connection, ReadOnlyGuard]:
    """Open an existing gormes database so that nothing can write through it."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.errors import StoreError
    from gormes.events.sqlite_schema import check_file, read_only_uri, translate_error

    if not path.exists():
        raise StoreError(f"no gormes database at {path}")
    if check_file(path):
        raise StoreError(f"{path} is empty: not a gormes database yet")
    try:
        conn = sqlite3.connect(read_only_uri(path), uri=True, isolation_level=None)
        conn.execute("PRAGMA query_only = 1")
    except sqlite3.Error as exc:
        raise translate_error(exc, path) from None
    guard = ReadOnlyGuard()
    conn.set_authorizer(guard)
    return conn, guard


def run(conn: sqlite3.Connection, guard: ReadOnlyGuard, sql: str, stopper: Stopper | None = None):
    """(column names, cursor over the rows) of one read-only statement."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.errors import ReadOnlyQuery, UserError

    try:
        cursor = conn.execute(sql)
    except (sqlite3.Error, sqlite3.Warning) as exc:
        stopped = stopper.error() if stopper is not None else None
        if stopped is not None:
            raise stopped from None
        if guard.refused is None and any(w in str(exc) for w in _WRITE_REFUSALS):
            guard.refused = str(exc)
        if guard.refused is not None:
            raise ReadOnlyQuery(
                f"refused: the query would write ({guard.refused}); gormes query is read-only"
            ) from None
        raise UserError(f"query failed: {exc}") from None
    columns = [d[0] for d in cursor.description or ()]
    return columns, cursor


def parse_timeout(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """`--timeout SECONDS`: a finite number of seconds above 0, at most
    PostgreSQL's limit; anything else is one line (exit 2)."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.errors import UserError

    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds <= MAX_TIMEOUT_S):
        raise UserError(
            f"--timeout takes a number of seconds above 0 and at most {MAX_TIMEOUT_S:g} "
            f"(got {value!r})"
        )
    return seconds


@click.command()
@click.argument("sql")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per row (column name: value); blobs as base64.")
@click.option("--timeout", metavar="SECONDS", default=str(DEFAULT_TIMEOUT_S), show_default=True,
              callback=parse_timeout,
              help="Stop the statement (and the streaming of its rows) after this long.")
@click.pass_obj
def query(obj, sql: str, as_json: bool, timeout: float) -> None:
    """Run one read-only SQL statement and print its rows.

    Tables: events(position, stream, version, type, type_version, data,
    recorded_at), tracking(projection, position), and the projections' tables.
    Any statement that would write is refused (exit status 2); one that runs
    past --timeout is stopped (exit status 1); Ctrl-C stops it at once. On
    PostgreSQL the statement runs alone, as a read-only login role, in a READ
    ONLY transaction rolled back afterwards (docs/postgres.md).
    """
    try:
        if obj.url is not None:
            _query_postgres(obj.url, sql, as_json, timeout)
        else:
            _query_sqlite(Path(obj.db), sql, as_json, timeout)
    except KeyboardInterrupt:
        raise click.exceptions.Abort() from None


def _query_sqlite(path: Path, sql: str, as_json: bool, timeout: float) -> None:
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.cli import output
    from gormes.errors import UserError

    conn, guard = open_read_only(path)
    try:
        with stoppable(conn, timeout) as stopper:
            columns, cursor = run(conn, guard, sql, stopper)
            try:
                if as_json:
                    output.write_json_objects(dict(zip(columns, row)) for row in cursor)
                else:
                    output.print_rows_table(columns, cursor)
            except sqlite3.Error as exc:
                stopped = stopper.error()
                if stopped is not None:
                    raise stopped from None
                raise UserError(f"query failed: {exc}") from None
    finally:
        conn.close()


def _query_postgres(url: str, sql: str, as_json: bool, timeout: float) -> None:
    from gormes.cli import output
    from gormes.cli.query_postgres import json_rows, open_read_only, run

    conn = open_read_only(url)
    try:
        with run(conn, sql, timeout=timeout) as (columns, rows):
            if as_json:
                output.write_json_objects(json_rows(columns, rows))
            else:
                output.print_rows_table(columns, rows)
    finally:
        conn.close()
