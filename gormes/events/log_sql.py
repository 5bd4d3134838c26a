"""The log's queries, written once for both stores.

Each is SQLite-style SQL with `?` placeholders: the SQLite log runs it on its
sqlite3 connection, the PostgreSQL log on its `PortableConnection`, which
rewrites the placeholders for psycopg. Where the dialects really differ (a type
GLOB, a list of streams as one parameter) the query takes the fragment of
`sql_fragments` for the connection it will run on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gormes.events.postgres_sql import POSTGRES, dialect_of
from gormes.events.sql_fragments import matching, one_of

COLUMNS = "position, stream, version, type, type_version, data, recorded_at"

HEAD = "SELECT coalesce(max(position), 0) FROM events"
COUNT = "SELECT count(*) FROM events"
STREAM_VERSION = "SELECT coalesce(max(version), 0) FROM events WHERE stream = ?"
READ_STREAM = f"SELECT {COLUMNS} FROM events WHERE stream = ? AND version > ? ORDER BY version"
FIRST_OF_STREAM = f"SELECT {COLUMNS} FROM events WHERE stream = ? ORDER BY version LIMIT 1"


_TYPED_READS: dict[tuple[type, tuple[str, ...]], tuple[str, list[Any]]] = {}  # see below
_TYPED_READS_MAX = 256


def read_stream_of_types(
    conn: Any, stream: str, after_version: int, types: Sequence[str]
) -> tuple[str, list[Any]]:
    """A stream's events after a version, only those of `types` (names or GLOB
    patterns): the others are skipped in the database, never decoded.

    The SQL and the patterns' parameters are made once per connection class and types
    (a run's inbox asks for the same type at every step)."""
    key = (type(conn), tuple(types))  # a connection's class tells its dialect
    known = _TYPED_READS.get(key)
    if known is None:
        patterns: list[Any] = []
        where = matching(conn, "type", types, patterns, indexed=False)
        if len(_TYPED_READS) >= _TYPED_READS_MAX:
            _TYPED_READS.clear()
        sql = f"SELECT {COLUMNS} FROM events WHERE stream = ? AND version > ? AND {where} ORDER BY version"
        known = _TYPED_READS[key] = (sql, patterns)
    sql, patterns = known
    return sql, [stream, after_version, *patterns]


def read_streams(conn: Any, streams: Sequence[str]) -> tuple[str, list[Any]]:
    """Several whole streams, in stream then version order."""
    params: list[Any] = []
    where = one_of(conn, "stream", streams, params)
    return f"SELECT {COLUMNS} FROM events WHERE {where} ORDER BY stream, version", params


def read_stream_tails(conn: Any, tails: Sequence[tuple[str, int]]) -> tuple[str, list[Any]]:
    """Each (stream, version) of `tails`: that stream's events after the version,
    in stream then version order; one query whatever their number (a JSON array
    of pairs on SQLite, two arrays unnested on PostgreSQL), each stream read
    through the (stream, version) index."""
    columns = ", ".join(f"e.{c}" for c in COLUMNS.split(", "))
    order = "ORDER BY e.stream, e.version"
    if dialect_of(conn) == POSTGRES:
        params: list[Any] = [[s for s, _ in tails], [v for _, v in tails]]
        return (
            f"SELECT {columns} FROM unnest(?::text[], ?::bigint[]) AS w(stream, after)"
            f" JOIN events AS e ON e.stream = w.stream AND e.version > w.after {order}"
        ), params
    return (
        f"SELECT {columns} FROM json_each(?) AS w CROSS JOIN events AS e"
        " ON e.stream = json_extract(w.value, '$[0]') AND e.version > json_extract(w.value, '$[1]')"
        f" {order}"
    ), [json.dumps([[s, v] for s, v in tails])]


def stream_versions(conn: Any, streams: Sequence[str]) -> tuple[str, list[Any]]:
    """(stream, its version) of each of `streams` that has events."""
    params: list[Any] = []
    where = one_of(conn, "stream", streams, params)
    return f"SELECT stream, max(version) FROM events WHERE {where} GROUP BY stream", params


def select_events(
    conn: Any,
    after: int,
    limit: int | None = None,
    types: Sequence[str] | None = None,
    *,
    streams: Sequence[str] | None = None,
    upto: int | None = None,
) -> tuple[str, list[Any]]:
    """Events after position `after` (up to `upto`), of the given types and streams
    (names or GLOB patterns), in position order, at most `limit` of them."""
    sql = f"SELECT {COLUMNS} FROM events WHERE position > ?"
    params: list[Any] = [after]
    if upto is not None:
        sql += " AND position <= ?"
        params.append(upto)
    if types:
        sql += " AND " + matching(conn, "type", types, params, indexed=False)
    if streams:
        sql += " AND " + matching(conn, "stream", streams, params)
    sql += " ORDER BY position"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return sql, params
