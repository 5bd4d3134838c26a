"""The few SQL fragments that differ between SQLite and PostgreSQL, by dialect.

Read-only SQL over the log (the doctor's checks, the audit export) is written
once, in the SQL both databases share with `?` placeholders (PortableConnection
runs it on PostgreSQL); only these fragments are picked by `dialect_of(conn)`:

    json_text(conn, "$.provenance.kind")  # json_extract(data, ...) / data::jsonb #>> '{...}'
    json_number(conn, "$.at")             # the same, as a number
    glob(conn, "type", "memory.*")        # type GLOB '...' / type ~ '^memory\\..*$'
    text_order(conn, "stream")            # compared byte by byte (COLLATE "C" on PostgreSQL)

Paths are constants of the code (`$.a.b`, keys of letters, digits and `_`);
GLOB patterns too. Neither is ever user text. The two fragments that take what
the caller names (event types, stream names) take it as parameters instead:

    matching(conn, "type", ["job.*", "note.added"], params)  # = ? / GLOB ? or ~ ?
    one_of(conn, "stream", names, params)                    # json_each(?) / = ANY(?)
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from gormes.events.postgres_sql import POSTGRES, dialect_of

_PATH = re.compile(r"^\$(\.[A-Za-z0-9_]+)+$")


def _postgres(conn: Any) -> bool:
    return dialect_of(conn) == POSTGRES


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _pg_path(path: str) -> str:
    """`$.a.b` as PostgreSQL's text-array path literal `'{a,b}'`."""
    if not _PATH.match(path):
        raise ValueError(f"not a simple JSON path: {path!r}")
    return _literal("{" + ",".join(path[2:].split(".")) + "}")


def _as_jsonb(column: str) -> str:
    """`column`'s JSON text as PostgreSQL's jsonb. JSON may escape U+0000, which no
    PostgreSQL text holds: casting such a row fails the whole statement (one job's
    data would stop a retention or a doctor's check). So each `\\u0000` escape is
    read as U+FFFD, the replacement character, before the cast: an escape swapped
    for an escape, the JSON stays valid, and only a value that held U+0000 (or the
    text "\\u0000" after a backslash) reads otherwise."""
    return f"replace({column}, '\\u0000', '\\ufffd')::jsonb"


def json_text(conn: Any, path: str, column: str = "data") -> str:
    """The JSON value at `path` ($.a.b) of `column`, as text on PostgreSQL (as
    json_extract gives it on SQLite: a string's text, a number, NULL when absent)."""
    return json_text_in(dialect_of(conn), path, column)


def json_text_in(dialect: str, path: str, column: str = "data") -> str:
    """`json_text` for a dialect named ("sqlite", "postgres"), where there is no
    connection to ask (an index's DDL, written before a database is opened). The
    same text every time: an expression index is used only by a query that spells
    its expression as the index does."""
    pg_path = _pg_path(path)
    if dialect != POSTGRES:
        return f"json_extract({column}, {_literal(path)})"
    return f"({_as_jsonb(column)} #>> {pg_path})"


def json_value(conn: Any, path: str, column: str = "data") -> str:
    """The JSON value at `path` as SQLite's json_extract gives it (an object or
    array as JSON text, a scalar as itself); on PostgreSQL as `jsonb`, which
    psycopg hands over decoded."""
    if not _postgres(conn):
        return json_text(conn, path, column)
    return f"({_as_jsonb(column)} #> {_pg_path(path)})"


def json_number(conn: Any, path: str, column: str = "data") -> str:
    """The JSON number at `path`, to compare or aggregate as a number."""
    text = json_text(conn, path, column)
    return f"{text}::numeric" if _postgres(conn) else text


def glob(conn: Any, column: str, pattern: str) -> str:
    """`column` matches the GLOB `pattern`, with SQLite's GLOB semantics on both
    (case-sensitive; `*`, `?`, `[...]`): a POSIX regex on PostgreSQL."""
    if not _postgres(conn):
        return f"{column} GLOB {_literal(pattern)}"
    from gormes.events.postgres_schema import glob_regex

    return f"{column} ~ {_literal(glob_regex(pattern))}"


def text_order(conn: Any, column: str) -> str:
    """`column` to compare (`<`, `>=`) byte by byte, as SQLite's BINARY collation
    does; a PostgreSQL database's own collation may order `-` or case otherwise."""
    return f'{column} COLLATE "C"' if _postgres(conn) else column


GLOB_CHARS = "*?["


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in GLOB_CHARS)


def matching(
    conn: Any, column: str, patterns: Sequence[str], params: list[Any], *, indexed: bool = True
) -> str:
    """`column` equal to one of the names or matching one of the GLOB patterns
    (SQLite's GLOB semantics on both, as `glob`), each a parameter added to `params`.

    `indexed=False`: no SQLite index leads with `column` (`type`). A GLOB whose
    pattern is a bare parameter makes SQLite re-prepare the statement at every
    run, in case the pattern's prefix could pick an index (the LIKE optimization):
    4-5x the cost of reading a stream's few rows. Bound as `(? || '')` it cannot."""
    postgres = _postgres(conn)
    if postgres:
        from gormes.events.postgres_schema import glob_regex
    clauses = []
    for pattern in patterns:
        if not is_glob(pattern):
            clauses.append(f"{column} = ?")
            params.append(pattern)
        elif postgres:
            clauses.append(f"{column} ~ ?")
            params.append(glob_regex(pattern))
        else:
            clauses.append(f"{column} GLOB ?" if indexed else f"{column} GLOB (? || '')")
            params.append(pattern)
    return "(" + " OR ".join(clauses) + ")"


def one_of(conn: Any, column: str, values: Sequence[str] | Sequence[int], params: list[Any]) -> str:
    """`column` is one of `values` (texts, or integers), passed as one parameter
    however many there are (a JSON array read by json_each on SQLite, an array on
    PostgreSQL)."""
    if _postgres(conn):
        params.append(list(values))
        return f"{column} = ANY(?)"
    params.append(json.dumps(list(values)))
    return f"{column} IN (SELECT value FROM json_each(?))"
