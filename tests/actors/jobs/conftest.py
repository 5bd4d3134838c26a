"""The `store` of the job-queue tests, on both backends.

Every test in tests/actors/jobs that asks for `store` runs twice: on a temp-file
SQLite database and on the real PostgreSQL server (a fresh schema per test,
dropped afterwards). The Postgres run is skipped, with the reason, only when the
server cannot be reached (CI starts one). Tests that need SQLite internals (a
file path, sqlite3) open their own SQLiteEventStore instead.
"""

from __future__ import annotations

from typing import Any

import pytest
from pg_helpers import backend, reopen_store, store_on_both_backends  # noqa: F401 (fixtures)


@pytest.fixture
def reopen() -> Any:
    """`reopen(store)`: another store on the same database (pg_helpers.reopen_store)."""
    return reopen_store
