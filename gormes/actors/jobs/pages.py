"""A bounded page of a ledger table read in a key's order (decision 0076 and its
addendum): `job.list`'s jobs, `job.inbox`'s messages.

A page holds at most `limit` rows and, past its first row, at most `max_bytes` of
their growing columns (UTF-8, as stored); it always holds the first row that
matches, so paging always moves on. The key is two columns, (a time, an id), and a
page starts past a cursor: the key of the last row of the page before.

No row past the page is read. SQLite's cursor steps one row at a time, and the page
stops at the first row that does not fit (read, to know that) or at `limit` + 1. On
PostgreSQL, whose client reads a whole result at once, the rows' sizes are read
first (`octet_length` reads a value's header, not the value), then the rows that
fit, between the first and the last of them by the key, their count as the LIMIT.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from gormes.events.postgres_sql import POSTGRES, dialect_of


class Keyset(NamedTuple):
    """How a table is paged: its rows in `key` order, cut on `growing`'s bytes."""

    table: str
    select: str  # the columns read ("*" or a list)
    key: tuple[str, str]
    growing: tuple[str, ...]
    descending: bool


class Page(NamedTuple):
    columns: list[str]
    rows: list[Sequence[Any]]
    more: bool  # rows past the last one here match too


def _where(terms: Sequence[str]) -> str:
    return " WHERE " + " AND ".join(terms) if terms else ""


def _order(keyset: Keyset) -> str:
    way = " DESC" if keyset.descending else ""
    return f" ORDER BY {keyset.key[0]}{way}, {keyset.key[1]}{way} LIMIT ?"


def _key(keyset: Keyset) -> str:
    return f"({keyset.key[0]}, {keyset.key[1]})"


def read_page(conn: Any, keyset: Keyset, where: Sequence[str], params: Sequence[Any], limit: int, *,
              past: tuple[Any, Any] | None, max_bytes: int) -> Page:
    """The rows matching `where` after `past` (a row's key) in `keyset`'s order, as
    a page (see the module's doc)."""
    terms, values = list(where), list(params)
    if past is not None:
        terms.append(f"{_key(keyset)} {'<' if keyset.descending else '>'} (?, ?)")
        values.extend(past)
    if dialect_of(conn) == POSTGRES:
        return _page_by_sizes(conn, keyset, terms, values, limit, max_bytes)
    cur = conn.execute(f"SELECT {keyset.select} FROM {keyset.table}" + _where(terms) + _order(keyset),
                       (*values, limit + 1))
    columns = [d[0] for d in cur.description]
    growing = [columns.index(column) for column in keyset.growing]
    rows: list[Sequence[Any]] = []
    held = 0
    for row in cur:
        size = sum(_utf8_len(row[i]) for i in growing)
        if len(rows) == limit or (rows and held + size > max_bytes):
            return Page(columns, rows, True)
        held += size
        rows.append(row)
    return Page(columns, rows, False)


def _utf8_len(text: str | None) -> int:
    if text is None:
        return 0
    return len(text) if text.isascii() else len(text.encode())


def _page_by_sizes(conn: Any, keyset: Keyset, where: list[str], params: list[Any], limit: int,
                   max_bytes: int) -> Page:
    size = " + ".join(f"coalesce(octet_length({column}), 0)" for column in keyset.growing)
    first_col, second_col = keyset.key
    sized = conn.execute(
        f"SELECT {first_col}, {second_col}, {size} FROM {keyset.table}" + _where(where) + _order(keyset),
        (*params, limit + 1),
    ).fetchall()
    taken, held = 0, 0
    for _at, _id, bytes_ in sized[:limit]:
        if taken and held + bytes_ > max_bytes:
            break
        held += bytes_
        taken += 1
    if not taken:
        return Page([], [], False)
    # The rows sized, read between the first and the last of them (an index range,
    # in order: no sort; a row added meanwhile is newer than all of them).
    (first_at, first_id, _), (last_at, last_id, _) = sized[0], sized[taken - 1]
    near, far = ("<=", ">=") if keyset.descending else (">=", "<=")
    span = [*where, f"{_key(keyset)} {near} (?, ?)", f"{_key(keyset)} {far} (?, ?)"]
    cur = conn.execute(
        f"SELECT {keyset.select} FROM {keyset.table}" + _where(span) + _order(keyset),
        (*params, first_at, first_id, last_at, last_id, taken),
    )
    return Page([d[0] for d in cur.description], cur.fetchall(), len(sized) > taken)
