"""The `streams` projection: one row per stream of the log.

    stream          the stream's name (primary key)
    first_type      type of its first event
    version         its version (number of events)
    first_position  position of its first event
    last_position   position of its last event
    updated_at      recorded_at of its last event

Every column comes from the log alone, so a rebuild gives the same rows.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from gormes.events.base import Recorded
from gormes.projections.schema import Index, Schema, Table

if TYPE_CHECKING:
    import sqlite_utils

TABLE = "streams"

_UPSERT = (
    f"INSERT INTO {TABLE}(stream, first_type, version, first_position, last_position, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(stream) DO UPDATE SET version = excluded.version, "
    "last_position = excluded.last_position, updated_at = excluded.updated_at"
)


SCHEMA = Schema(
    tables=(
        Table(
            TABLE,
            {
                "stream": str,
                "first_type": str,
                "version": int,
                "first_position": int,
                "last_position": int,
                "updated_at": float,
            },
            "stream",
            frozenset({"first_type", "version", "first_position", "last_position", "updated_at"}),
        ),
    ),
    indexes=(Index(TABLE, ("updated_at",)),),
)


class StreamsProjection:
    name = "streams"
    version = 1
    tables = (TABLE,)
    types = None  # every event
    holds_payload = False  # names, positions, first types: a redaction leaves it exact
    schema = SCHEMA

    def setup(self, db: sqlite_utils.Database) -> None:
        SCHEMA.create_sqlite(db)

    def apply(self, conn: sqlite3.Connection, records: list[Recorded]) -> None:
        # Fold the batch per stream first: one upsert per stream, not per event.
        # Records come in position order, so the first one seen of a new stream
        # is its first event, and the insert branch of the upsert records it.
        rows: dict[str, list[object]] = {}
        for r in records:
            row = rows.get(r.stream)
            if row is None:
                rows[r.stream] = [r.stream, r.type, r.version, r.position, r.position, r.recorded_at]
            else:
                row[2], row[4], row[5] = r.version, r.position, r.recorded_at
        conn.executemany(_UPSERT, rows.values())


streams = StreamsProjection()
