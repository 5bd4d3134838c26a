"""The `store` of the recall tests (the same as tests/memory/conftest.py), on both backends (the pattern of
tests/projections/conftest.py): every test that asks for `store` runs on a
temp-file SQLite database and on the real PostgreSQL server (a fresh schema per
test, dropped afterwards; skipped, with the reason, only when the server cannot
be reached). `backend` says which."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pg_helpers import backend_store


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def store(backend: str, db_path: Path) -> AsyncIterator[Any]:
    async with backend_store(backend, db_path) as s:
        yield s

