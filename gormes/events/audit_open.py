"""The index of open write-ahead calls: the `started` audit records no record names
yet (decision 0067).

    audit_open(position)

One row per `started` record (decision 0062) whose outcome is not in the log.
The database keeps it, not gormes: two triggers on `events` insert a row with
the `started` record and delete it with the record that names it
(`started_position`), in the transaction that inserts them, whoever inserts
them (this gormes, an older one, an import). So finding the calls started with
no outcome reads as many rows as there are open calls, however long the log.

The triggers' names carry the rules' version (`VERSION`). Reads trust the rows
only when this version's trigger is there (`current`). A database with no
index (one an older gormes wrote), or one built by other rules, gets it from
the first audit record a writing gormes appends (`ensure`, called by
`append_sealed` once per store and process): the table, the triggers, and its
rows built from the whole log, once, in that transaction. A store that may not
write (a read-only file or session) reads the log's audit records instead, as
before the index.

Plain blocking functions over one connection (`?` SQL: an sqlite3 connection or
PostgreSQL's PortableConnection).
"""

from __future__ import annotations

from typing import Any

from gormes.events.postgres_sql import POSTGRES, dialect_of
from gormes.events.sql_fragments import json_number, json_text

TABLE = "audit_open"
VERSION = 1
TRIGGER = f"{TABLE}_v{VERSION}"  # PostgreSQL's trigger and its function; SQLite's two triggers' prefix
AUDIT_TYPE = "audit.operation"

# The open calls' records, in log order (a record removed since, by retention, has no row to join).
# Ordered by the index's column: by the events' one, SQLite walks the whole log to probe the index.
OPEN_ROWS = ("SELECT e.position, e.stream, e.type_version, e.data FROM audit_open o"
             " JOIN events e ON e.position = o.position ORDER BY o.position")

_SQLITE_TRIGGERS = (
    f"CREATE TRIGGER {TRIGGER}_started AFTER INSERT ON events"
    f" WHEN NEW.type = '{AUDIT_TYPE}' AND json_extract(NEW.data, '$.outcome') = 'started'"
    " BEGIN INSERT INTO audit_open(position) VALUES (NEW.position); END",
    f"CREATE TRIGGER {TRIGGER}_ended AFTER INSERT ON events"
    f" WHEN NEW.type = '{AUDIT_TYPE}' AND json_extract(NEW.data, '$.started_position') IS NOT NULL"
    " BEGIN DELETE FROM audit_open WHERE position = json_extract(NEW.data, '$.started_position'); END",
)
# JSON may escape U+0000, which no PostgreSQL text holds: read as U+FFFD, as sql_fragments does.
_POSTGRES_TRIGGER = (
    f"CREATE OR REPLACE FUNCTION {TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $body$"
    " DECLARE record jsonb := replace(NEW.data, '\\u0000', '\\ufffd')::jsonb;"
    " BEGIN"
    "  IF record ->> 'outcome' = 'started' THEN"
    "   INSERT INTO audit_open(position) VALUES (NEW.position);"
    "  ELSIF record ->> 'started_position' IS NOT NULL THEN"
    "   DELETE FROM audit_open WHERE position = (record ->> 'started_position')::bigint;"
    "  END IF;"
    "  RETURN NULL;"
    " END $body$",
    f"CREATE TRIGGER {TRIGGER} AFTER INSERT ON events FOR EACH ROW"
    f" WHEN (NEW.type = '{AUDIT_TYPE}') EXECUTE FUNCTION {TRIGGER}()",
)


def current(conn: Any) -> bool:
    """Whether the rows may be trusted: the table is there, with this version's
    trigger keeping it (and, on PostgreSQL, this session may read it)."""
    if dialect_of(conn) == POSTGRES:
        row = conn.execute(
            "SELECT has_table_privilege(to_regclass('audit_open'), 'SELECT') FROM pg_trigger"
            " WHERE tgname = ? AND tgrelid = to_regclass('events') AND to_regclass('audit_open') IS NOT NULL",
            (TRIGGER,),
        ).fetchone()
        return bool(row and row[0])
    found = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE (type = 'table' AND name = 'audit_open')"
        " OR (type = 'trigger' AND name IN (?, ?))", (f"{TRIGGER}_started", f"{TRIGGER}_ended"),
    ).fetchone()[0]
    return bool(found == 3)


def ensure(conn: Any) -> bool:
    """Make the index current, inside a write transaction whose appends so far were
    sent (`Transaction.execute` sends them): if it is not, drop other versions'
    triggers, make the table and this version's triggers, and index every open
    call of the log. Whether it had to."""
    if current(conn):
        return False
    postgres = dialect_of(conn) == POSTGRES
    for name in _other_triggers(conn, postgres):
        conn.execute(f'DROP TRIGGER "{name}" ON events' if postgres else f'DROP TRIGGER "{name}"')
    integer = "BIGINT" if postgres else "INTEGER"
    conn.execute(f"CREATE TABLE IF NOT EXISTS audit_open(position {integer} PRIMARY KEY)")
    conn.execute("DELETE FROM audit_open")
    for statement in _POSTGRES_TRIGGER if postgres else _SQLITE_TRIGGERS:
        conn.execute(statement)
    build(conn)
    return True


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
        conn.executemany("INSERT INTO audit_open(position) VALUES (?)", [(p,) for p in open_calls])
    return len(open_calls)


def _other_triggers(conn: Any, postgres: bool) -> list[str]:
    """Triggers of other versions of this index (`audit_open_v<n>...`)."""
    if postgres:
        rows = conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass('events') AND left(tgname, 12) = 'audit_open_v'"
        ).fetchall()
    else:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND substr(name, 1, 12) = 'audit_open_v'"
        ).fetchall()
    return [name for (name,) in rows]
