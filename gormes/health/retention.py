"""Retention check: how big the database is, the horizon of the last retention and
the space it could give back (decision 0029, docs/retention.md)."""

from __future__ import annotations

import time

from gormes.events.retention import last_horizon, retained_events, space
from gormes.health import Check, DoctorContext, Verdict, age, ok, size, warn

CONVERT = (
    "the file was made before gormes set auto_vacuum: its free pages are reused by later writes, "
    "but it never shrinks; to convert it once, stop every gormes process and run "
    "`sqlite3 DB 'PRAGMA auto_vacuum=INCREMENTAL; VACUUM'` (it rewrites the file: needs as much free disk again)"
)
FREE_WARN_FRACTION = 0.25


def _horizon(ctx: DoctorContext) -> str:
    horizon = last_horizon(ctx.db)
    if horizon is None:
        return "no retention has run (`gormes retain --older-than DURATION`)"
    return (f"retention horizon {time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime(horizon))} "
            f"({age(ctx.now - horizon)} ago), {retained_events(ctx.db)} event(s) archived")


def check_size(ctx: DoctorContext) -> Verdict:
    """SQLite: the file, its free pages (what incremental_vacuum gives back) and the horizon."""
    s = space(ctx.db)
    when = _horizon(ctx)
    assert s.free_bytes is not None
    text = f"{size(s.file_bytes)} in the file, {size(s.free_bytes)} reclaimable (free pages); {when}"
    if s.auto_vacuum == "incremental" or s.file_bytes == 0:
        return ok(text + "; auto_vacuum incremental")
    if s.free_bytes > FREE_WARN_FRACTION * s.file_bytes:
        return warn(f"{text}; auto_vacuum {s.auto_vacuum}", CONVERT)
    return ok(f"{text}; auto_vacuum {s.auto_vacuum} (free pages are reused, the file does not shrink)")


def check_retention_postgres(ctx: DoctorContext) -> Verdict:
    """PostgreSQL: the events table (indexes and TOAST included) and the horizon;
    the rows a retention deletes are dead until autovacuum makes their space reusable."""
    s = space(ctx.db)
    return ok(f"events table {size(s.file_bytes)}; {_horizon(ctx)}; deleted rows are reclaimed by autovacuum")


CHECKS = [
    Check(name="store.size", category="store", run=check_size, backend="sqlite",
          elsewhere="the file is SQLite's; on PostgreSQL store.retention reports the events table and the horizon"),
    Check(name="store.retention", category="store", run=check_retention_postgres, backend="postgres"),
]
