"""The `schedules` projection: one row per live cron schedule.

    name, schedule, job, data (JSON), queue, status (active | paused),
    created_at, counts_from (fires at or before it never happen: added or resumed),
    updated_at, last_fire_at, last_job_id, fires

Times are milliseconds since the epoch, taken from the events, so a rebuild gives
the same rows. A removed schedule's row is deleted. The next fire time depends on
the clock, so readers compute it (gormes/actors/cron/rules.py `next_due`).
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import msgspec

from gormes.events.base import Recorded
from gormes.events.cron import (
    CRON_STREAM_PREFIX,
    CronFired,
    CronPaused,
    CronRemoved,
    CronResumed,
    CronScheduled,
)

from gormes.projections.schema import Schema, Table, replace_sql

if TYPE_CHECKING:
    import sqlite_utils

TABLE = "schedules"

_encode = msgspec.json.Encoder().encode


COLUMNS = (
    "name", "schedule", "job", "data", "queue", "status", "created_at", "counts_from",
    "updated_at", "last_fire_at", "last_job_id", "fires",
)

SCHEMA = Schema(
    tables=(
        Table(
            TABLE,
            {
                "name": str, "schedule": str, "job": str, "data": str, "queue": str,
                "status": str, "created_at": int, "counts_from": int, "updated_at": int,
                "last_fire_at": int,
                "last_job_id": str, "fires": int,
            },
            "name",
            frozenset({
                "schedule", "job", "queue", "status", "created_at", "counts_from", "updated_at",
                "fires",
            }),
        ),
    ),
)

# A schedule added again under a removed one's name replaces the row, as INSERT OR
# REPLACE did (a live name cannot be added twice: the decider refuses it).
_SCHEDULE = replace_sql(TABLE, COLUMNS, "name", "?, ?, ?, ?, ?, 'active', ?, ?, ?, NULL, NULL, 0")


class SchedulesProjection:
    name = "schedules"
    version = 1
    tables = (TABLE,)
    types = ("cron.*",)
    schema = SCHEMA

    def setup(self, db: sqlite_utils.Database) -> None:
        SCHEMA.create_sqlite(db)

    def apply(self, conn: sqlite3.Connection, records: list[Recorded]) -> None:
        for r in records:
            if not r.stream.startswith(CRON_STREAM_PREFIX):
                continue
            name, e = r.stream[len(CRON_STREAM_PREFIX):], r.event
            if isinstance(e, CronScheduled):
                conn.execute(
                    _SCHEDULE,
                    (name, e.schedule, e.job, _encode(e.data).decode(), e.queue, e.at, e.at, e.at),
                )
            elif isinstance(e, CronPaused):
                conn.execute(
                    f"UPDATE {TABLE} SET status = 'paused', updated_at = ? WHERE name = ?",
                    (e.at, name),
                )
            elif isinstance(e, CronResumed):
                conn.execute(
                    f"UPDATE {TABLE} SET status = 'active', counts_from = ?, updated_at = ?"
                    " WHERE name = ?",
                    (e.at, e.at, name),
                )
            elif isinstance(e, CronRemoved):
                conn.execute(f"DELETE FROM {TABLE} WHERE name = ?", (name,))
            elif isinstance(e, CronFired):
                conn.execute(
                    f"UPDATE {TABLE} SET last_fire_at = ?, last_job_id = ?, fires = fires + 1"
                    " WHERE name = ?",
                    (e.fire_at, e.job_id, name),
                )


schedules = SchedulesProjection()


def read_rows(conn: sqlite3.Connection) -> list[dict[str, object]]:
    """Every schedule row by name, `data` decoded."""
    rows = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM {TABLE} ORDER BY name").fetchall()
    out = []
    for row in rows:
        record = dict(zip(COLUMNS, row))
        record["data"] = msgspec.json.decode(record["data"]) if record["data"] else None
        out.append(record)
    return out
