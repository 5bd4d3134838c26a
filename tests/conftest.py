from __future__ import annotations

from pathlib import Path

import pytest

from gormes.events.catalog import load_all

load_all()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gormes.db"


@pytest.fixture
async def store(db_path: Path):
    from gormes.events.sqlite import SQLiteEventStore

    async with SQLiteEventStore.open(db_path) as s:
        yield s
