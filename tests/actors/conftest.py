"""The `store` of the job-queue tests, on both backends.

Every test in tests/actors that asks for `store` runs twice: on a temp-file
SQLite database and on the real PostgreSQL server (a fresh schema per test,
dropped afterwards). The Postgres run is skipped, with the reason, only when the
server cannot be reached (CI starts one). Tests that need SQLite internals (a
file path, sqlite3) open their own SQLiteEventStore instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pg_helpers import PG_URL, fresh_schema


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def store(backend: str, db_path: Path) -> AsyncIterator[Any]:
    if backend == "sqlite":
        from gormes.events.sqlite import SQLiteEventStore

        async with SQLiteEventStore.open(db_path) as s:
            yield s
        return
    from gormes.events.postgres import PostgresEventStore

    with fresh_schema() as schema:
        async with PostgresEventStore.open(PG_URL, schema=schema, poll_interval=0.05) as s:
            yield s


@pytest.fixture
def reopen() -> Any:
    """`reopen(store)`: another store on the same database, as a second process or
    host would open it (an async context manager)."""

    def open_again(store: Any) -> Any:
        if getattr(store, "dialect", "sqlite") == "postgres":
            from gormes.events.postgres import PostgresEventStore

            return PostgresEventStore.open(store.url, schema=store.schema, poll_interval=0.05)
        from gormes.events.sqlite import SQLiteEventStore

        return SQLiteEventStore.open(store.path)

    return open_again
