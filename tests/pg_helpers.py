"""The real PostgreSQL server the Postgres tests use, and a fresh schema per test.

The server is the one on 127.0.0.1:5432 (trust auth, database `test`) unless
GORMES_TEST_PG_URL names another. When it cannot be reached, the tests that need
it are skipped with the reason; CI starts it, so there they run.
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

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
