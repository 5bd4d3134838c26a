"""One SQL text for both stores: SQLite's `?` placeholders run on PostgreSQL.

Read models (the job ledger, the queue's reads) are written once, in the SQL
both databases share, with `?` placeholders as sqlite3 takes them. On PostgreSQL
they go through `PortableConnection`, which rewrites each statement for psycopg
(`?` outside string literals becomes `%s`, a literal `%` becomes `%%`) and
otherwise hands it over unchanged. What really differs between the two dialects
(JSON access, scalar `max`, GLOB) is not translated here: the callers pick a
fragment by `dialect_of(conn)`.

PostgreSQL's text cannot hold U+0000 (NUL), and SQLite's can. So on PostgreSQL a
str parameter holding NUL goes with U+FFFD in its place (`pg_params`, decision
0078): the text columns of the projections (a job's name and keys in the ledger,
a fact or an entity's name in memory's tables), which a log written on SQLite may
hold from before decision 0074, and every lookup of them alike. The log's own
events never pass here (their JSON text escapes NUL, and the store inserts them
on its own connection): what was recorded is copied as it was.

    conn = PortableConnection(psycopg_conn)
    conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # importing psycopg is left to the Postgres store (startup time)
    import psycopg

SQLITE = "sqlite"
POSTGRES = "postgres"

NUL = "\x00"
REPLACEMENT = "\ufffd"  # U+FFFD REPLACEMENT CHARACTER


def pg_params(params: Sequence[Any]) -> tuple[Any, ...]:
    """`params` as PostgreSQL's text takes them: each str (alone, or in a list or
    tuple: an array) holding NUL with U+FFFD in its place; the others as they are."""
    out = tuple(params)
    for value in out:  # on every statement: exact classes are the cheapest test (0.8 us for 26)
        kind = value.__class__
        if kind is str:
            if NUL in value:
                return tuple(_without_nul(v) for v in out)
        elif (kind is list or kind is tuple) and any(v.__class__ is str and NUL in v for v in value):
            return tuple(_without_nul(v) for v in out)
    return out


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace(NUL, REPLACEMENT)
    if isinstance(value, (list, tuple)):
        return type(value)(v.replace(NUL, REPLACEMENT) if isinstance(v, str) else v for v in value)
    return value


@functools.lru_cache(maxsize=4096)
def to_psycopg(sql: str) -> str:
    """`?` placeholders as `%s`, a literal `%` as `%%` (string literals and quoted
    identifiers are left as they are, except that `%` in them is doubled too)."""
    out: list[str] = []
    quote: str | None = None
    for c in sql:
        if c == "%":
            out.append("%%")
        elif quote is not None:
            out.append(c)
            if c == quote:
                quote = None
        elif c in ("'", '"'):
            quote = c
            out.append(c)
        elif c == "?":
            out.append("%s")
        else:
            out.append(c)
    return "".join(out)


def dialect_of(conn: Any) -> str:
    """"postgres" for a `PortableConnection` (or a Postgres transaction), else "sqlite"."""
    return getattr(conn, "dialect", SQLITE)


class PortableConnection:
    """A psycopg connection that runs SQLite-style SQL (`?` placeholders).

    `execute` always passes parameters (an empty tuple when there are none), so
    psycopg always reads `%%` as one `%`; a str parameter's NUL goes as U+FFFD
    (`pg_params`). Everything else (`transaction`,
    `closed`, `info`, ...) is the psycopg connection's own, and `raw` is the
    connection itself for PostgreSQL SQL.
    """

    dialect = POSTGRES

    def __init__(self, conn: psycopg.Connection) -> None:
        self.raw = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor:
        return self.raw.execute(to_psycopg(sql), pg_params(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self.raw.cursor() as cur:
            cur.executemany(to_psycopg(sql), [pg_params(row) for row in rows])

    def stream(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """The rows of a query as the server sends them, a chunk at a time: for
        results too large to hold (`execute` reads the whole result first)."""
        return stream_rows(self.raw.cursor(), to_psycopg(sql), pg_params(params))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


STREAM_CHUNK = 1000


def stream_rows(cursor: psycopg.Cursor, sql: str, params: Sequence[Any] | None) -> Iterator[tuple[Any, ...]]:
    """`cursor.stream`, in chunks where this libpq can (17 and later), else row by row."""
    from psycopg import capabilities

    size = STREAM_CHUNK if capabilities.has_stream_chunked() else 1
    return cursor.stream(sql, params, size=size)


def iter_rows(conn: Any, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
    """The rows of a `?` query, read as they come on either database (sqlite3's
    cursor already does; on PostgreSQL `PortableConnection.stream`)."""
    if dialect_of(conn) == POSTGRES:
        return conn.stream(sql, params)
    return conn.execute(sql, params)
