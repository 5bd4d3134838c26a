"""The real PostgreSQL server the Postgres tests use, and a fresh schema per test.

The server is the one on 127.0.0.1:5432 (trust auth, database `test`) unless
GORMES_TEST_PG_URL names another. When it cannot be reached, the tests that need
it are skipped with the reason; CI starts it, so there they run.
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

PG_URL = os.environ.get("GORMES_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


@functools.cache
def unreachable_reason() -> str | None:
    try:
        psycopg.connect(PG_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0]
    return None


def require_postgres() -> None:
    reason = unreachable_reason()
    if reason is not None:
        pytest.skip(f"PostgreSQL is not reachable at {PG_URL}: {reason}")


def admin(sql: str, params: tuple = ()) -> list[tuple]:
    """Run one statement on a connection of its own (autocommit); rows if any."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A new empty schema, dropped with everything in it afterwards."""
    require_postgres()
    name = f"gormes_test_{secrets.token_hex(5)}"
    admin(f'CREATE SCHEMA "{name}"')
    try:
        yield name
    finally:
        admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def url_for_schema(schema: str) -> str:
    """A URL whose connections use `schema` (for the CLI, which takes only a URL)."""
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}options=-csearch_path%3D{schema}"


@contextmanager
def login_role(*grants: str, prefix: str = "gormes_role") -> Iterator[str]:
    """A throwaway LOGIN role given `grants` (`{role}` filled in, quoted), dropped
    with what it owns afterwards."""
    role = f"{prefix}_{secrets.token_hex(4)}"
    admin(f'CREATE ROLE "{role}" LOGIN')
    try:
        for grant in grants:
            admin(grant.format(role=f'"{role}"'))
        yield role
    finally:
        admin(f'DROP OWNED BY "{role}"')
        admin(f'DROP ROLE "{role}"')


def as_role(url: str, role: str) -> str:
    """`url` connecting as `role` (trust auth: no password)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


@asynccontextmanager
async def backend_store(backend: str, sqlite_path: Path, **options: Any) -> AsyncIterator[Any]:
    """An event store on `backend`: the SQLite file `sqlite_path`, or a fresh
    Postgres schema (dropped afterwards; the test is skipped when the server
    cannot be reached). `options` go to the store's `open` (a `clock`, say)."""
    if backend == "sqlite":
        from gormes.events.sqlite import SQLiteEventStore

        async with SQLiteEventStore.open(sqlite_path, **options) as store:
            yield store
        return
    from gormes.events.postgres import PostgresEventStore

    with fresh_schema() as schema:
        async with PostgresEventStore.open(
            PG_URL, schema=schema, poll_interval=0.05, **options
        ) as store:
            yield store


def reopen_store(store: Any) -> Any:
    """Another store on the same database as `store`, as a second process or host
    would open it (an async context manager)."""
    if getattr(store, "dialect", "sqlite") == "postgres":
        from gormes.events.postgres import PostgresEventStore

        return PostgresEventStore.open(store.url, schema=store.schema, poll_interval=0.05)
    from gormes.events.sqlite import SQLiteEventStore

    return SQLiteEventStore.open(store.path)


# Fixtures for the test packages that run on both backends; a conftest.py takes
# them with `from pg_helpers import backend, store_on_both_backends`.


@pytest.fixture(name="url")
def schema_url() -> Iterator[str]:
    """A URL naming a fresh schema of its own, dropped after the test (for a test
    that runs the CLI with `--db URL`)."""
    with fresh_schema() as name:
        yield url_for_schema(name)


def pg_rows(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(name="store")
async def store_on_both_backends(backend: str, db_path: Path) -> AsyncIterator[Any]:
    """`store`: a temp-file SQLite store, then a fresh Postgres schema's store."""
    async with backend_store(backend, db_path) as s:
        yield s
