"""Open the event store a target names: a PostgreSQL URL or an SQLite file.

    async with open_store("postgresql://db.internal/gormes") as store: ...
    async with open_store("/var/lib/gormes/gormes.db") as store: ...

`postgresql://...` (or `postgres://...`) opens the Postgres store; anything else
is a path to an SQLite file, optionally written `sqlite:PATH`. Keyword arguments
go to the store's `open` (`readonly`, `durability`, `codec`, ...).

It loads every built-in event type first (`catalog.load_all`): a script that reads
the log through the public API gets `job.submitted` as a `JobSubmitted`, not as an
`UnknownEvent`, without importing the domain modules itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from os import PathLike
from typing import Any

SQLITE_PREFIX = "sqlite:"
URL_PREFIXES = ("postgresql://", "postgres://")


def is_postgres_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(URL_PREFIXES)


def sqlite_path(target: str | PathLike[str]) -> str | PathLike[str]:
    """The file path of an SQLite target (`sqlite:PATH` or a plain path)."""
    if isinstance(target, str) and target.startswith(SQLITE_PREFIX):
        return target[len(SQLITE_PREFIX):]
    return target


@asynccontextmanager
async def open_store(target: str | PathLike[str], **kwargs: Any) -> AsyncIterator[Any]:
    from gormes.events.catalog import load_all

    load_all()
    if is_postgres_url(target):
        from gormes.events.postgres import PostgresEventStore

        async with PostgresEventStore.open(str(target), **kwargs) as store:
            yield store
    else:
        from gormes.events.sqlite import SQLiteEventStore

        async with SQLiteEventStore.open(sqlite_path(target), **kwargs) as store:
            yield store
