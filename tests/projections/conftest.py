"""The `store` of the projection tests, on both backends (the pattern of
tests/actors/conftest.py).

Every test in tests/projections that asks for `store` runs twice: on a temp-file
SQLite database and on the real PostgreSQL server (a fresh schema per test,
dropped afterwards); the Postgres run is skipped, with the reason, only when the
server cannot be reached. Writes get times from an injected clock (distinct and
increasing), so rows holding times can be compared exactly. projection_helpers.py
reads tables through the store's own read connection, on either backend.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pg_helpers import backend, backend_store, reopen_store  # noqa: F401 (fixture)


@pytest.fixture
async def store(backend: str, tmp_path: Path) -> AsyncIterator[Any]:
    ticks = itertools.count(1_000)
    clock = lambda: float(next(ticks))  # noqa: E731
    async with backend_store(backend, tmp_path / "gormes.db", clock=clock) as s:
        yield s


@pytest.fixture
def reopen() -> Any:
    """`reopen(store)`: another store on the same database (pg_helpers.reopen_store)."""
    return reopen_store
