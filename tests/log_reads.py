"""What a test reads of a SQLite log from outside, as another process would: its
head, and the types appended after a position (what a refused call left: its
audit record and nothing else)."""

from __future__ import annotations

from pathlib import Path

from gormes.events.sqlite import SQLiteEventStore


async def log_head(db: Path) -> int:
    async with SQLiteEventStore.open(db) as store:
        return await store.head()


async def types_after(db: Path, head: int) -> list[str]:
    async with SQLiteEventStore.open(db) as store:
        return [r.type for r in await store.read_all(after_position=head)]
