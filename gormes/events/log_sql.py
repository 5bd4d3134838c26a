"""The log's queries, written once for both stores.

Each is SQLite-style SQL with `?` placeholders: the SQLite log runs it on its
sqlite3 connection, the PostgreSQL log on its `PortableConnection`, which
rewrites the placeholders for psycopg. Where the dialects really differ (a type
GLOB, a list of streams as one parameter) the query takes the fragment of
`sql_fragments` for the connection it will run on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gormes.events.sql_fragments import matching, one_of

COLUMNS = "position, stream, version, type, type_version, data, recorded_at"

HEAD = "SELECT coalesce(max(position), 0) FROM events"
COUNT = "SELECT count(*) FROM events"
STREAM_VERSION = "SELECT coalesce(max(version), 0) FROM events WHERE stream = ?"
READ_STREAM = f"SELECT {COLUMNS} FROM events WHERE stream = ? AND version > ? ORDER BY version"


def read_streams(conn: Any, streams: Sequence[str]) -> tuple[str, list[Any]]:
    """Several whole streams, in stream then version order."""
    params: list[Any] = []
    where = one_of(conn, "stream", streams, params)
    return f"SELECT {COLUMNS} FROM events WHERE {where} ORDER BY stream, version", params


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
        sql += " AND " + matching(conn, "type", types, params)
    if streams:
        sql += " AND " + matching(conn, "stream", streams, params)
    sql += " ORDER BY position"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return sql, params
