"""Worker heartbeats: one row per worker in `worker_heartbeats`, refreshed on an interval.

A row is cheap to keep (an UPDATE every few seconds, no event in the log) and
lets the doctor tell a live worker (recent `last_seen`, no `stopped_at`) from a
dead one. Times are the store's clock (seconds since the epoch).

    SELECT worker_id, pid, last_seen FROM worker_heartbeats WHERE stopped_at IS NULL
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from gormes.events.postgres_sql import POSTGRES
from gormes.events.store import EventStore, Transaction

TABLE = "worker_heartbeats"

# REAL is a float8 on SQLite but a float4 on PostgreSQL (seconds since the epoch
# would lose minutes): the column type is the one thing that differs.
_CREATE = """
CREATE TABLE IF NOT EXISTS {table}(
    worker_id TEXT PRIMARY KEY,
    pid INTEGER,
    host TEXT,
    info TEXT,
    started_at {real} NOT NULL,
    last_seen {real} NOT NULL,
    beats INTEGER NOT NULL DEFAULT 0,
    stopped_at {real}
)
"""


def create_sql(tx: Transaction) -> str:
    """The table's DDL in the dialect of `tx` (a store transaction)."""
    postgres = tx.dialect == POSTGRES
    return _CREATE.format(table=TABLE, real="DOUBLE PRECISION" if postgres else "REAL")


class Heartbeat:
    """`describe()` is called at every beat, so the row carries live state (the
    governor's current limit, active jobs) as well as the worker's identity."""

    def __init__(
        self, store: EventStore, worker_id: str,
        describe: Callable[[], dict[str, Any]] | dict[str, Any],
    ) -> None:
        self._store = store
        self.worker_id = worker_id
        self._describe = describe if callable(describe) else (lambda: describe)

    async def beat(self) -> None:
        worker_id, info = self.worker_id, self._describe()
        info_json = msgspec.json.encode(info).decode()

        def write(tx: Transaction) -> None:
            tx.execute(create_sql(tx))
            # `{TABLE}.beats`: PostgreSQL finds a bare `beats` ambiguous with `excluded`
            tx.execute(
                f"INSERT INTO {TABLE}(worker_id, pid, host, info, started_at, last_seen, beats) "
                "VALUES (?, ?, ?, ?, ?, ?, 1) ON CONFLICT(worker_id) DO UPDATE SET "
                f"info = excluded.info, last_seen = excluded.last_seen, beats = {TABLE}.beats + 1, "
                "stopped_at = NULL",
                (worker_id, info.get("pid"), info.get("host"), info_json, tx.now, tx.now),
            )

        await self._store.transact(write)

    async def stopped(self) -> None:
        worker_id = self.worker_id

        def write(tx: Transaction) -> None:
            tx.execute(create_sql(tx))
            tx.execute(
                f"UPDATE {TABLE} SET stopped_at = ?, last_seen = ? WHERE worker_id = ?",
                (tx.now, tx.now, worker_id),
            )

        await self._store.transact(write)
