"""A store to throw away: a SQLite file, or a fresh schema of a PostgreSQL database
that is dropped afterwards (the recall evals and the benchmarks seed one, read it,
and leave nothing behind).

    async with scratch_store(tmp / "eval.db") as store: ...                 # SQLite
    async with scratch_store("postgresql://127.0.0.1/test", "bench") as store: ...
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gormes.events.sqlite import SQLiteEventStore


@asynccontextmanager
async def scratch_store(target: str | Path, prefix: str = "gormes_scratch", *, clock: Any = None) -> AsyncIterator[Any]:
    """A `Path` opens that SQLite file (durability normal: nothing here must survive
    a crash); a string is a PostgreSQL URL, in which a schema named `prefix` and a
    random suffix is made, used and dropped. `clock`: the store's, where it is not
    the system's (a benchmark's records dated in the past)."""
    options = {} if clock is None else {"clock": clock}
    if isinstance(target, Path):
        async with SQLiteEventStore.open(target, durability="normal", **options) as store:
            yield store
        return
    # Lazy for start-up time: psycopg is loaded only for a PostgreSQL URL.
    import psycopg

    from gormes.events.postgres import PostgresEventStore

    schema = f"{prefix}_{secrets.token_hex(5)}"
    with psycopg.connect(target, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        async with PostgresEventStore.open(target, schema=schema, **options) as store:
            yield store
    finally:
        with psycopg.connect(target, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
