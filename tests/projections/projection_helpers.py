"""Reading projection tables in tests, on either backend (through `store.read_with`)."""

from __future__ import annotations

from typing import Any


def _sql(log: Any) -> Any:
    """The read connection for SQL with `?` placeholders, on either backend."""
    return getattr(log, "sql", None) or log.conn


async def rows(store: Any, sql: str, params: tuple = ()) -> list[tuple]:
    def read(log: Any) -> list[tuple]:
        return [tuple(r) for r in _sql(log).execute(sql, params).fetchall()]

    return await store.read_with(read)


async def status_of(store: Any, name: str, version: int) -> Any:
    from gormes.projections.bookkeeping import read_status

    def read(log: Any) -> Any:
        [status] = read_status(_sql(log), [(name, version)])
        return status

    return await store.read_with(read)
