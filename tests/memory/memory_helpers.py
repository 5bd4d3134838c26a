"""Reading memory tables in tests, on either backend (through `store.read_with`)."""

from __future__ import annotations

from typing import Any


async def rows(store: Any, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows of `sql` (`?` placeholders) through the store's own read connection."""
    from gormes.projections.memory import read_connection

    return await store.read_with(
        lambda log: [tuple(r) for r in read_connection(log).execute(sql, params).fetchall()]
    )
