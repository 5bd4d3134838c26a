"""Rebuilding projections in place, and checking them against a rebuild.

`rebuild` works on SQLite and PostgreSQL. `check` (SQLite only) never writes to the live database. It copies it with SQLite's backup API
(one consistent snapshot of log, tables and tracking) into a scratch file, rebuilds
each projection there from position 0 up to the position its live tables had
reached, and compares the two sets of tables row by row. Comparing at the same
position means a projection that is merely behind is not reported as different.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import msgspec

from gormes.projections import bookkeeping
from gormes.projections.runner import Progress, Projection, ProjectionRunner

ProgressFor = Callable[[Projection], Progress | None]
EXAMPLES = 5


class RebuildResult(msgspec.Struct, frozen=True):
    name: str
    version: int
    position: int


class Difference(msgspec.Struct, frozen=True):
    """One way the live tables differ from a rebuild."""

    table: str
    # "missing" (a rebuilt row the live table lacks), "unexpected" (a live row the
    # rebuild lacks), "more" (further rows not listed), "count", "columns",
    # "no table", "version"
    kind: str
    row: dict[str, Any] | None = None
    detail: str = ""

    def __str__(self) -> str:
        if self.row is not None:
            label = "missing from live" if self.kind == "missing" else "unexpected in live"
            return f"{self.table}: row {label}: {self.row}"
        return f"{self.table}: {self.detail}"


class CheckResult(msgspec.Struct, frozen=True):
    name: str
    position: int  # where live and rebuilt tables were compared
    state: str  # "identical", "different", "stale" (built by another version), "not built"
    differences: list[Difference]

    @property
    def differs(self) -> bool:
        return bool(self.differences)


def _no_progress(projection: Projection) -> None:
    return None


async def rebuild(
    db: str | PathLike[str],
    projections: Sequence[Projection],
    progress_for: ProgressFor = _no_progress,
) -> list[RebuildResult]:
    """Rebuild each projection in place from position 0 to the head.

    `db` is an SQLite path or a PostgreSQL URL. On PostgreSQL the job ledger is
    rebuilt by `ledger.rebuild` (one transaction, its own DDL), and a projection
    that runs on SQLite only is refused with a `ProjectionError` before anything
    is written."""
    from gormes.events.open import open_store
    from gormes.events.postgres_sql import POSTGRES, dialect_of
    from gormes.projections import ledger

    results = []
    async with open_store(db) as store:
        postgres = dialect_of(store) == POSTGRES
        runners = {
            p.name: ProjectionRunner(store, p)
            for p in projections if not (postgres and p.name == ledger.NAME)
        }
        for projection in projections:
            if projection.name in runners:
                position = await runners[projection.name].rebuild(progress=progress_for(projection))
            else:
                await ledger.install(store)
                position = await ledger.rebuild(store)
            results.append(RebuildResult(projection.name, projection.version, position))
    return results


async def check(
    db: str | PathLike[str],
    projections: Sequence[Projection],
    progress_for: ProgressFor = _no_progress,
) -> list[CheckResult]:
    """Rebuild each projection in a scratch copy and report how the live tables differ."""
    from gormes.events.sqlite import SQLiteEventStore
    from gormes.events.sqlite_schema import check_file

    db = Path(db)
    check_file(db)  # a clear error for a missing or foreign file, before copying it
    with tempfile.TemporaryDirectory(prefix="gormes-check-") as scratch:
        live = Path(scratch) / "live.db"
        rebuilt = Path(scratch) / "rebuilt.db"
        backup(db, live)
        backup(live, rebuilt)
        results = []
        async with SQLiteEventStore.open(rebuilt, durability="normal") as store:
            for projection in projections:
                built, position = _built(live, projection.name)
                if built is None:
                    results.append(CheckResult(projection.name, 0, "not built", []))
                    continue
                if built != projection.version:
                    why = Difference(
                        ",".join(projection.tables),
                        "version",
                        detail=f"live tables were built by version {built}; "
                        f"this gormes builds version {projection.version}",
                    )
                    results.append(CheckResult(projection.name, position, "stale", [why]))
                    continue
                runner = ProjectionRunner(store, projection)
                await runner.rebuild(upto=position, progress=progress_for(projection))
                differences = compare_tables(rebuilt, live, projection.tables)
                state = "different" if differences else "identical"
                results.append(CheckResult(projection.name, position, state, differences))
        return results


def backup(source: Path, target: Path) -> None:
    """Copy a database, WAL included, as one consistent snapshot."""
    src = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def _built(path: Path, name: str) -> tuple[int | None, int]:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return bookkeeping.built_version(conn, name), bookkeeping.tracked_position(conn, name)
    finally:
        conn.close()


def compare_tables(rebuilt: Path, live: Path, tables: Sequence[str]) -> list[Difference]:
    """How the live tables differ from the rebuilt ones (a few example rows per kind)."""
    conn = sqlite3.connect(rebuilt)
    try:
        conn.execute("ATTACH DATABASE ? AS live", (str(live),))
        differences: list[Difference] = []
        for table in tables:
            differences.extend(_compare_table(conn, table))
        return differences
    finally:
        conn.close()


def _columns(conn: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA {schema}.table_info({_quote(table)})")]


def _compare_table(conn: sqlite3.Connection, table: str) -> list[Difference]:
    expected = _columns(conn, "main", table)
    actual = _columns(conn, "live", table)
    if not actual:
        return [Difference(table, "no table", detail="table missing from the live database")]
    if expected != actual:
        detail = f"live columns {actual} differ from rebuilt columns {expected}"
        return [Difference(table, "columns", detail=detail)]
    cols = ", ".join(_quote(c) for c in expected)
    q = _quote(table)
    differences = []
    for kind, first, second in (("missing", "main", "live"), ("unexpected", "live", "main")):
        rows = conn.execute(
            f"SELECT {cols} FROM {first}.{q} EXCEPT SELECT {cols} FROM {second}.{q} "
            f"ORDER BY 1 LIMIT {EXAMPLES + 1}"
        ).fetchall()
        for row in rows[:EXAMPLES]:
            differences.append(Difference(table, kind, row=dict(zip(expected, row))))
        if len(rows) > EXAMPLES:
            detail = f"more {kind} rows than the {EXAMPLES} listed"
            differences.append(Difference(table, "more", detail=detail))
    # EXCEPT compares sets; a duplicated row shows only in the counts.
    counts = [
        conn.execute(f"SELECT count(*) FROM {schema}.{q}").fetchone()[0]
        for schema in ("main", "live")
    ]
    if not differences and counts[0] != counts[1]:
        detail = f"live has {counts[1]} rows, rebuilt has {counts[0]}"
        differences.append(Difference(table, "count", detail=detail))
    return differences


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
