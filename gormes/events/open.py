"""Open the event store a target names: a PostgreSQL URL or an SQLite file.

    async with open_store("postgresql://db.internal/gormes") as store: ...
    async with open_store("/var/lib/gormes/gormes.db") as store: ...

`postgresql://...` (or `postgres://...`) opens the Postgres store; a path opens
an SQLite file, optionally written `sqlite:PATH`. Any other `scheme://` value and
a libpq keyword string (`host=... dbname=...`) are refused (`store_target`,
decision 0089): taken for a path, they became a new SQLite file named after them.
Keyword arguments go to the store's `open` (`readonly`, `durability`, `codec`, ...).

It loads every built-in event type first (`catalog.load_all`): a script that reads
the log through the public API gets `job.submitted` as a `JobSubmitted`, not as an
`UnknownEvent`, without importing the domain modules itself.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from os import PathLike
from pathlib import Path
from typing import Any

from gormes.errors import StoreError, UserError

SQLITE_PREFIX = "sqlite:"
URL_PREFIXES = ("postgresql://", "postgres://")
ACCEPTED = "a postgresql:// (or postgres://) URL, an SQLite file path, or sqlite:PATH"
# RFC 3986's scheme, then `//`: a URL, whatever its scheme.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# libpq's keyword form starts with a keyword and `=` (`host=db dbname=gormes`);
# a file named so is still reachable as `./name` or `sqlite:name`.
_KEYWORD = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*=")


class UnknownDatabase(UserError):
    """A database value that is neither a PostgreSQL URL nor an SQLite path."""


def is_postgres_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(URL_PREFIXES)


def sqlite_path(target: str | PathLike[str]) -> str | PathLike[str]:
    """The file path of an SQLite target (`sqlite:PATH` or a plain path)."""
    if isinstance(target, str) and target.startswith(SQLITE_PREFIX):
        return target[len(SQLITE_PREFIX):]
    return target


def store_target(value: str, option: str = "--db") -> str:
    """The store `value` names: a PostgreSQL URL as given, or an SQLite path
    (`sqlite:` removed). Pure; the one reading of `--db`, GORMES_DB, `migrate
    --from/--to` and `open_store`'s string. The refusal shows the value with its
    passwords masked (`redact`): it may be a connection string holding one."""
    if is_postgres_url(value):
        return value
    if value.startswith(SQLITE_PREFIX):
        return value[len(SQLITE_PREFIX):]
    if _URL.match(value):
        raise UnknownDatabase(f"{option} {_shown(value)} is a URL gormes does not open; give {ACCEPTED}")
    if _KEYWORD.match(value):
        raise UnknownDatabase(
            f"{option} {_shown(value)} is a libpq keyword string, which gormes does not take; "
            f"give {ACCEPTED} (postgresql://USER:PASSWORD@HOST:PORT/DBNAME)"
        )
    return value


def _shown(value: str) -> str:
    from gormes.events.postgres_schema import redact  # lazy: psycopg, for a refusal only

    return repr(redact(value))


def require_database(target: str | PathLike[str]) -> None:
    """A read that finds no SQLite file at `target` says so, as every read does
    (exit 1), before anything could make one; a URL's server answers for itself."""
    if is_postgres_url(target):
        return
    path = Path(sqlite_path(target))
    if not path.exists():
        raise StoreError(f"no gormes database at {path}")


@asynccontextmanager
async def open_store(target: str | PathLike[str], **kwargs: Any) -> AsyncIterator[Any]:
    from gormes.events.catalog import load_all

    load_all()
    if isinstance(target, str):
        target = store_target(target, "the store target")
    if is_postgres_url(target):
        from gormes.events.postgres import PostgresEventStore

        async with PostgresEventStore.open(str(target), **kwargs) as store:
            yield store
    else:
        from gormes.events.sqlite import SQLiteEventStore

        async with SQLiteEventStore.open(sqlite_path(target), **kwargs) as store:
            yield store
