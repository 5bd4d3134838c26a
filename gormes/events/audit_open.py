"""The index of open write-ahead calls: the `started` audit records no record names
yet (decision 0067, and its addendum).

    audit_open_v2(position)

One row per `started` record (decision 0062) whose outcome is not in the log.
The writer of the records keeps it: sealing a `started` record inserts its row
and sealing the record that names it (`started_position`) deletes it, in the
transaction that appends them (`index_in`, called by `audit_chain.seal`). An
ordinary audit record costs nothing: only a write-ahead call's records touch
the index. So finding the calls started with no outcome reads as many rows as
there are open calls, however long the log.

The table's name carries the rules' version (`VERSION`). Reads trust the rows
only when this version's table is there (`current`). A database with no index
(one an older gormes wrote), or one built by other rules, gets it before this
process's first write-ahead record (`ensure`, run by `append_sealed` in a
transaction of its own): the table, and its rows built from the whole log,
once. A build that fails is tried again by a later write-ahead call (see
`audit_chain._index`). An import or a migration that copies records in raw builds
it again in its transaction (`refresh`). A reader that finds no current index (a
read-only copy of such a database, a build that failed) reads the log's audit
records instead, as before the index, and says so (`state`).

Not kept: the calls of a gormes older than the index that writes the same
database at once (another host in a rolling upgrade). Its `started` records get
no row, and its outcomes delete none, so `gormes audit unfinished` on a newer
host does not list its unfinished calls until the index is built again.

Plain blocking functions over one connection (`?` SQL: an sqlite3 connection or
PostgreSQL's PortableConnection).
"""

from __future__ import annotations

from typing import Any

from gormes.errors import StoreError, UserError
from gormes.events.postgres_sql import POSTGRES, dialect_of
from gormes.events.sql_fragments import json_number, json_text

VERSION = 2
TABLE = f"audit_open_v{VERSION}"
AUDIT_TYPE = "audit.operation"
_FORMER = "audit_open"  # every version's table and trigger starts so (version 1 kept it by triggers)

# The open calls' records, in log order (a record removed since, by retention, has no row to join).
# Ordered by the index's column: by the events' one, SQLite walks the whole log to probe the index.
OPEN_ROWS = (f"SELECT e.position, e.stream, e.type_version, e.data FROM {TABLE} o"
             " JOIN events e ON e.position = o.position ORDER BY o.position")


CURRENT, MISSING, UNREADABLE = "current", "missing", "unreadable"
UNKEPT = "unkept"  # there, and this session may not keep it (PostgreSQL): what a writer must not pass over


class IndexNotKept(StoreError, UserError):
    """A write to the log that the open calls' index must follow, by a database role
    that may not keep the index: refused with it, or the index would miss it while
    the readers who may read it trust it."""


def state(conn: Any) -> str:
    """`CURRENT` when the rows may be trusted (as `current`); else why not: `MISSING`
    (this version's table is not there: not built yet, or its build failed) or, on
    PostgreSQL, `UNREADABLE` (this session may not read it)."""
    if dialect_of(conn) == POSTGRES:
        row = conn.execute("SELECT to_regclass(?) IS NOT NULL, has_table_privilege(to_regclass(?), 'SELECT')",
                           (TABLE, TABLE)).fetchone()
        return CURRENT if row[1] else UNREADABLE if row[0] else MISSING
    found = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,))
    return CURRENT if found.fetchone()[0] else MISSING


def keeping(conn: Any) -> str:
    """What a writer may do with the index: `CURRENT` (keep it), `MISSING` (build it;
    until then readers read the log) or `UNKEPT`: this version's table is there and,
    on PostgreSQL, this session may not read, insert into and delete from it (a role
    granted its tables before the index was made, by another role)."""
    if dialect_of(conn) == POSTGRES:
        row = conn.execute(
            "SELECT to_regclass(?) IS NOT NULL, has_table_privilege(to_regclass(?), 'SELECT')"
            " AND has_table_privilege(to_regclass(?), 'INSERT') AND has_table_privilege(to_regclass(?), 'DELETE')",
            (TABLE,) * 4).fetchone()
        return CURRENT if row[1] else UNKEPT if row[0] else MISSING
    return state(conn)


def not_kept(conn: Any, missed: str) -> IndexNotKept:
    """The refusal of a write the index would miss (`missed`: what it would be)."""
    role, schema = conn.execute("SELECT current_user, current_schema()").fetchone()
    return IndexNotKept(
        f"database role {role!r} may not keep the open calls' index {schema}.{TABLE}, which would then"
        f" miss {missed} (`gormes audit unfinished`, the doctor): GRANT SELECT, INSERT, DELETE ON"
        f' "{schema}".{TABLE} TO "{role}"')


def current(conn: Any) -> bool:
    """Whether the rows may be trusted: this version's table is there (and, on
    PostgreSQL, this session may read it)."""
    return state(conn) == CURRENT


def ensure(conn: Any) -> bool:
    """Make the index current, inside a write transaction whose appends so far were
    sent (`Transaction.execute` sends them): if it is missing, drop what other versions
    left (tables, version 1's triggers), make the table, and index every open call of
    the log. Whether it had to. (One this session may not keep is left as it is: the
    seal of a `started` record refuses, see `index_in`.)"""
    if keeping(conn) != MISSING:
        return False
    _drop_former(conn)
    integer = "BIGINT" if dialect_of(conn) == POSTGRES else "INTEGER"
    conn.execute(f"CREATE TABLE {TABLE}(position {integer} PRIMARY KEY)")
    build(conn)
    return True


def refresh(conn: Any) -> None:
    """After records were copied in raw (an import, a migration's continuation): the
    index built again from the log, if this database has one."""
    kept = keeping(conn)
    if kept == UNKEPT:
        raise not_kept(conn, "the write-ahead calls copied in")
    if kept == CURRENT:
        conn.execute(f"DELETE FROM {TABLE}")
        build(conn)


def index_in(conn: Any, started: list[int], ended: list[int]) -> None:
    """In the transaction that appends a write-ahead call's records: the `started`
    records' positions indexed, the positions their outcomes name taken out. Nothing,
    while the database has no index (the build will read them from the log).

    A `started` record this session may not index is refused (`IndexNotKept`, the
    transaction with it: the call does not run). An outcome is never refused for
    the index (its call's effect has happened): its row, if any, stays, and the call
    is listed as unfinished, the safe side of a wrong answer."""
    kept = keeping(conn)
    if kept != CURRENT:
        if kept == UNKEPT and started:
            raise not_kept(conn, "this call if it did not finish")
        return
    for position in ended:
        conn.execute(f"DELETE FROM {TABLE} WHERE position = ?", (position,))
    for position in started:
        conn.execute(f"INSERT INTO {TABLE}(position) VALUES (?)", (position,))


def build(conn: Any) -> int:
    """Index the open calls of the whole log (one pass over its write-ahead
    records); how many."""
    outcome, named = json_text(conn, "$.outcome"), json_number(conn, "$.started_position")
    rows = conn.execute(
        f"SELECT position, {outcome}, {named} FROM events"
        f" WHERE type = ? AND ({outcome} = 'started' OR {named} IS NOT NULL) ORDER BY position",
        (AUDIT_TYPE,),
    ).fetchall()
    open_calls: dict[int, None] = {}
    for position, kind, started in rows:
        if kind == "started":
            open_calls[position] = None
        elif started is not None:
            open_calls.pop(int(started), None)
    if open_calls:
        conn.executemany(f"INSERT INTO {TABLE}(position) VALUES (?)", [(p,) for p in open_calls])
    return len(open_calls)


def _drop_former(conn: Any) -> None:
    """What other versions of this index left: their triggers on `events` and, on
    PostgreSQL, the triggers' functions (version 1), then their tables."""
    if dialect_of(conn) == POSTGRES:
        triggers = conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass('events') AND left(tgname, 10) = ?",
            (_FORMER,)).fetchall()
        for (name,) in triggers:
            conn.execute(f'DROP TRIGGER "{name}" ON events')
        functions = conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = current_schema() AND left(p.proname, 10) = ?", (_FORMER,)).fetchall()
        for (name,) in functions:
            conn.execute(f'DROP FUNCTION "{name}"()')
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND left(tablename, 10) = ?",
            (_FORMER,)).fetchall()
    else:
        for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND substr(name, 1, 10) = ?",
                (_FORMER,)).fetchall():
            conn.execute(f'DROP TRIGGER "{name}"')
        tables = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, 10) = ?", (_FORMER,)).fetchall()
    for (name,) in tables:
        conn.execute(f'DROP TABLE "{name}"')
