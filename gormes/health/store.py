"""Store checks: is this our database, in WAL mode, intact, gap-free and readable?

`open_database` is also the gate of every other database check: a file that is
missing, not SQLite, not a gormes database or written by a newer gormes is
reported here and the rest is skipped (reading it would prove nothing).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

from gormes.events.retention import retained_events
from gormes.events.sqlite_schema import APPLICATION_ID, SCHEMA_VERSION, read_only_uri
from gormes.health import Check, DoctorContext, Verdict, age, fail, listing, ok, warn
from gormes.health.scan import split_key

QUICK_CHECK_MAX_ERRORS = 20
RESTORE = (
    "stop every gormes process, copy the file aside, then restore from a backup "
    "(or salvage with `sqlite3 DB .recover`)"
)


def open_database(path: Path) -> tuple[sqlite3.Connection | None, Verdict]:
    """A read-only connection and the `store.schema` verdict; no connection when the
    file is not one the other checks can read."""
    if not path.exists():
        return None, fail(
            f"no database at {path}",
            "pass --db PATH (or set GORMES_DB) to the database gormes uses; "
            "any write command creates a new one",
        )
    if path.is_dir():
        return None, fail(f"{path} is a directory", "pass --db PATH to a gormes database file")
    try:
        conn = sqlite3.connect(read_only_uri(path), uri=True, isolation_level=None, timeout=30.0)
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        user_version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    except sqlite3.Error as exc:
        return None, fail(f"{path} cannot be read as SQLite: {exc}", RESTORE)
    if app_id == 0 and tables == 0:
        conn.close()
        return None, warn(
            f"{path} is empty: no gormes schema yet",
            "run any write command once (e.g. `gormes jobs submit echo`) to create the schema",
        )
    if app_id != APPLICATION_ID:
        conn.close()
        return None, fail(
            f"{path} is SQLite but not a gormes database (application_id {app_id:#x})",
            "point --db at the gormes database; gormes never touches a foreign file",
        )
    if user_version > SCHEMA_VERSION:
        conn.close()
        return None, fail(
            f"schema version {user_version} is newer than this gormes understands ({SCHEMA_VERSION})",
            "upgrade gormes; this version must not write to the file",
        )
    if user_version < SCHEMA_VERSION:
        return conn, warn(
            f"schema version {user_version} is older than this gormes's ({SCHEMA_VERSION})",
            "open it once with a write command of this gormes to migrate it",
        )
    return conn, ok(f"gormes database, schema version {user_version}")


def check_wal(ctx: DoctorContext) -> Verdict:
    mode = ctx.db.execute("PRAGMA journal_mode").fetchone()[0]
    if mode.lower() == "wal":
        return ok("journal mode WAL")
    return warn(
        f"journal mode is {mode}, not WAL: readers block the writer and commits cost more",
        "open the database once with any gormes write command (it sets WAL), "
        "or run `sqlite3 DB 'PRAGMA journal_mode=WAL'` while gormes is stopped",
    )


def parse_quick_check(rows: Iterable[tuple[str]]) -> list[str]:
    """The problems `PRAGMA quick_check` reported; empty when it said `ok`."""
    lines = [row[0] for row in rows]
    return [] if lines == ["ok"] else lines


def check_integrity(ctx: DoctorContext) -> Verdict:
    """`PRAGMA quick_check` reads the whole file: it runs with `--full` and on a
    database the doctor has not checked before; otherwise the last full check's
    verdict stands, with its age (gormes/health/scan.py)."""
    summary = ctx.log
    if not ctx.full and summary.integrity_at is not None:
        verdict = integrity_verdict(summary.integrity)
        when = f" (the last full check, {age(ctx.now - summary.integrity_at)} ago; `gormes doctor --full` checks again)"
        return Verdict(verdict.status, verdict.message + when, verdict.remediation)
    try:
        rows = ctx.db.execute(f"PRAGMA quick_check({QUICK_CHECK_MAX_ERRORS})").fetchall()
    except sqlite3.DatabaseError as exc:
        return fail(f"quick_check could not read the file: {exc}", RESTORE)
    summary.integrity_at, summary.integrity = ctx.now, parse_quick_check(rows)
    return integrity_verdict(summary.integrity)


def integrity_verdict(problems: list[str]) -> Verdict:
    if not problems:
        return ok("PRAGMA quick_check: ok")
    more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
    return fail(f"PRAGMA quick_check found corruption: {problems[0]}{more}", RESTORE)


def check_positions(ctx: DoctorContext) -> Verdict:
    summary = ctx.log
    count, low, high = summary.count, summary.low, summary.high
    if count == 0:
        return ok("the log is empty")
    if low == 1 and high == count:
        return ok(f"positions 1..{high}, no gaps")
    missing = high - count
    retained = retained_events(ctx.db)
    if missing == retained:  # the holes retention left, each recorded (decision 0029)
        return ok(f"positions up to {high}: {retained} archived by retention (`gormes retain`), no other gaps")
    holes = _holes(ctx.db, low, high)
    if retained:
        missing -= retained
    return fail(
        f"{missing} position(s) missing from the log"
        f"{f' beyond the {retained} archived by retention' if retained else ''}: {listing(holes)}",
        "events were deleted outside gormes: restore the file from a backup; read models "
        "built from the damaged log may be wrong (`gormes projections rebuild` after restoring)",
    )


def _holes(conn: sqlite3.Connection, low: int, high: int) -> list[str]:
    ranges = [] if low == 1 else [_range(1, low - 1)]
    starts = conn.execute(
        "SELECT position + 1 FROM events AS e WHERE position < ? AND NOT EXISTS "
        "(SELECT 1 FROM events WHERE position = e.position + 1) ORDER BY position LIMIT 6",
        (high,),
    ).fetchall()
    for (start,) in starts:
        end = conn.execute("SELECT min(position) - 1 FROM events WHERE position > ?", (start,)).fetchone()[0]
        ranges.append(_range(start, end))
    return ranges


def _range(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"


def check_event_types(ctx: DoctorContext) -> Verdict:
    unknown: list[tuple[str, int]] = []
    total = 0
    for key, n in sorted(ctx.log.types.items()):
        type_, type_version = split_key(key)
        cls = ctx.codec.class_for(type_)
        if cls is None:
            unknown.append((type_, n))
        elif type_version > cls.schema_version:
            unknown.append((f"{type_} v{type_version}", n))
        else:
            continue
        total += n
    if not unknown:
        return ok("every event type in the log is known to this gormes")
    return warn(
        f"{total} event(s) of types this gormes cannot decode (kept raw): "
        + listing([f"{t} ({n})" for t, n in unknown]),
        "they were written by a newer gormes or by a plugin not loaded here: upgrade gormes "
        "or load the module that defines them; nothing is lost meanwhile",
    )


def check_event_streams(ctx: DoctorContext) -> Verdict:
    found = ctx.log.off_family
    if not found:
        return ok("every event is on a stream of its type's family")
    total = sum(found.values())
    positions = ", ".join(str(p) for p in ctx.log.off_family_first)
    return warn(
        f"{total} event(s) off their type's family of streams, not read as what they say "
        f"(decision 0086): {listing([f'{t} ({n})' for t, n in sorted(found.items())])}; "
        f"first at position(s) {positions}",
        "an older gormes imported or appended them (this one refuses to): see what they are "
        "with `gormes events --json`, and `gormes redact` them if they should not stay",
    )


CHECKS = [
    Check(name="store.wal", category="store", run=check_wal, backend="sqlite",
          elsewhere="SQLite's journal mode; PostgreSQL keeps its own WAL (see store.server)"),
    Check(name="store.integrity", category="store", run=check_integrity, backend="sqlite",
          elsewhere="PRAGMA quick_check is SQLite's; on PostgreSQL run pg_amcheck on the server"),
    Check(name="store.positions", category="store", run=check_positions),
    Check(name="store.event_types", category="store", run=check_event_types),
    Check(name="store.event_streams", category="store", run=check_event_streams),
]
