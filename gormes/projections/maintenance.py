"""Rebuilding projections in place, and checking them against a rebuild.

`rebuild_store` works on SQLite and PostgreSQL (the operator's
`projections.rebuild`, gormes/tools/projections_admin.py, calls it through the
audited door; on PostgreSQL the projections that run on SQLite only are left out,
`on_postgres`). `check` never writes to the live
database. It takes one consistent snapshot of log, tables and tracking into a
scratch copy, rebuilds each projection there from position 0 up to the position
its live tables had reached, and compares the two sets of tables row by row.
Comparing at the same position means a projection that is merely behind is not
reported as different.

- SQLite: the copy is a scratch file made with SQLite's backup API.
- PostgreSQL (`check_postgres`): the copy is a scratch schema on the same server
  (`gormes_check_<random>`, dropped afterwards), filled in one REPEATABLE READ
  transaction: the log, and each projection's live tables as `live__<table>`.
"""

from __future__ import annotations

import secrets
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from gormes.errors import StoreError, UserError
from gormes.events.log_sql import COLUMNS
from gormes.events.postgres_sql import POSTGRES, PortableConnection
from gormes.events.sqlite import SQLiteEventStore
from gormes.events.sqlite_schema import check_file
from gormes.projections import bookkeeping
from gormes.projections.runner import Progress, Projection, ProjectionRunner

if TYPE_CHECKING:
    from gormes.events.store import EventStore, Transaction

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


def on_postgres(projections: Sequence[Projection], named: bool) -> tuple[list[Projection], list[str]]:
    """(the projections that run on PostgreSQL, the names of those left out: they
    run on SQLite only). One of those `named` by the operator is refused."""
    from gormes.projections.ledger import NAME as LEDGER
    from gormes.projections.schema import schema_of

    portable = [p for p in projections if schema_of(p) is not None or p.name == LEDGER]
    others = [p.name for p in projections if p not in portable]
    if others and named:
        raise UserError(f"projection {', '.join(others)} runs on SQLite only; it is not available on "
                        "PostgreSQL (docs/postgres.md)")
    return portable, others


async def rebuild_store(
    store: EventStore,
    projections: Sequence[Projection],
    progress_for: ProgressFor = _no_progress,
) -> list[RebuildResult]:
    """Rebuild each projection in place from position 0 to the head.

    On PostgreSQL the job ledger is rebuilt by `ledger.rebuild` (one transaction,
    its own DDL), and a projection that runs on SQLite only is refused with a
    `ProjectionError` before anything is written."""
    from gormes.projections import ledger

    results = []
    postgres = store.dialect == POSTGRES
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

                async def rebuild_upto(projection: Projection = projection, position: int = position) -> None:
                    runner = ProjectionRunner(store, projection)
                    await runner.rebuild(upto=position, progress=progress_for(projection))

                results.append(await _check_one(
                    projection, built, position, rebuild_upto,
                    lambda projection=projection: compare_tables(rebuilt, live, projection.tables),
                ))
        return results


async def _check_one(
    projection: Projection, built: int | None, position: int,
    rebuild_upto: Callable[[], Awaitable[None]], compare: Callable[[], list[Difference]],
) -> CheckResult:
    """The check of one projection whose live tables were `built` by that version up
    to `position`: rebuild the scratch copy up to there, then compare."""
    if built is None:
        return CheckResult(projection.name, 0, "not built", [])
    if built != projection.version:
        why = Difference(
            ",".join(projection.tables),
            "version",
            detail=f"live tables were built by version {built}; "
            f"this gormes builds version {projection.version}",
        )
        return CheckResult(projection.name, position, "stale", [why])
    await rebuild_upto()
    differences = compare()
    return CheckResult(projection.name, position, "different" if differences else "identical", differences)


async def check_postgres(
    url: str,
    projections: Sequence[Projection],
    progress_for: ProgressFor = _no_progress,
) -> list[CheckResult]:
    """`check` on PostgreSQL: the scratch copy is a schema of its own on the same
    server, dropped afterwards whatever happens; the live schema is only read."""
    # Lazy for start-up time: psycopg is loaded only for a PostgreSQL URL.
    import psycopg
    from psycopg import sql

    from gormes.events.postgres import PostgresEventStore
    from gormes.events.postgres_schema import connect, first_line, prepare
    from gormes.projections import ledger

    conn = connect(url, application_name="gormes projections check")
    try:
        live = prepare(conn, url, create=False)  # an existing gormes schema, or a clear error
        scratch = f"gormes_check_{secrets.token_hex(6)}"
        try:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(scratch)))
        except psycopg.Error as exc:
            raise StoreError(f"--check rebuilds in a scratch schema and cannot create one: "
                             f"{first_line(exc)}") from None
        try:
            async with PostgresEventStore.open(url, schema=scratch):
                pass  # the scratch schema gets gormes' own tables first
            snapshot = _snapshot_postgres(conn, live, scratch, projections)
            results = []
            async with PostgresEventStore.open(url, schema=scratch) as store:
                for projection in projections:
                    built, position = snapshot[projection.name]

                    async def rebuild_upto(projection: Projection = projection, position: int = position) -> None:
                        if projection.name == ledger.NAME:
                            await _rebuild_ledger_postgres(store, position)
                        else:
                            runner = ProjectionRunner(store, projection)
                            await runner.rebuild(upto=position, progress=progress_for(projection))

                    results.append(await _check_one(
                        projection, built, position, rebuild_upto,
                        lambda projection=projection: _compare_postgres(conn, scratch, _postgres_tables(projection)),
                    ))
            return results
        finally:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(scratch)))
    finally:
        conn.close()


_LIVE_PREFIX = "live__"


def _snapshot_postgres(
    conn: Any, live: str, scratch: str, projections: Sequence[Projection],
) -> dict[str, tuple[int | None, int]]:
    """In one REPEATABLE READ transaction: each projection's (built version, tracked
    position), its live tables copied into `scratch` as `live__<table>`, and the
    log copied into `scratch`'s events table."""
    found: dict[str, tuple[int | None, int]] = {}
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        portable = PortableConnection(conn)  # on the live schema (the URL's search_path)
        for projection in projections:
            found[projection.name] = (bookkeeping.built_version(portable, projection.name),
                                      bookkeeping.tracked_position(portable, projection.name))
            for table in _postgres_tables(projection):
                if _pg_columns(conn, live, table):
                    conn.execute(f"CREATE TABLE {_quote(scratch)}.{_quote(_LIVE_PREFIX + table)} AS "
                                 f"SELECT * FROM {_quote(live)}.{_quote(table)}")
        conn.execute(f"INSERT INTO {_quote(scratch)}.events({COLUMNS}) "
                     f"SELECT {COLUMNS} FROM {_quote(live)}.events")
    return found


async def _rebuild_ledger_postgres(store: EventStore, position: int) -> None:
    """The job ledger, folded afresh from the log up to `position` (it is kept
    inline with appends on the live schema, so it has no runner of its own)."""
    from gormes.projections import ledger, ledger_postgres

    def run(tx: Transaction) -> None:
        ledger_postgres.set_up(tx.conn, ledger.NAME, ledger.VERSION)
        tx.execute("SELECT 1")
        ledger.reset(tx.conn)
        ledger.catch_up(tx.conn, before=position + 1)

    await store.transact(run)


def _postgres_tables(projection: Projection) -> tuple[str, ...]:
    """The tables a projection has on PostgreSQL (its portable schema's: no FTS5)."""
    from gormes.projections.schema import schema_of

    schema = schema_of(projection)
    return tuple(t.name for t in schema.tables) if schema is not None else tuple(projection.tables)


def _pg_columns(conn: Any, schema: str, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = %s ORDER BY ordinal_position", (schema, table),
    ).fetchall()
    return [name for (name,) in rows]


def _compare_postgres(conn: Any, scratch: str, tables: Sequence[str]) -> list[Difference]:
    differences: list[Difference] = []
    for table in tables:
        differences.extend(_compare_table(
            conn, table, f"{_quote(scratch)}.{_quote(table)}",
            f"{_quote(scratch)}.{_quote(_LIVE_PREFIX + table)}",
            _pg_columns(conn, scratch, table), _pg_columns(conn, scratch, _LIVE_PREFIX + table),
        ))
    return differences


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
            q = _quote(table)
            differences.extend(_compare_table(
                conn, table, f"main.{q}", f"live.{q}",
                _columns(conn, "main", table), _columns(conn, "live", table),
            ))
        return differences
    finally:
        conn.close()


def _columns(conn: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA {schema}.table_info({_quote(table)})")]


def _compare_table(conn: Any, table: str, rebuilt: str, live: str, expected: list[str],
                   actual: list[str]) -> list[Difference]:
    """`rebuilt` and `live`: the two tables as SQL names (schema-qualified, quoted);
    `expected` and `actual`: their columns in order (none: the live one is missing).
    The SQL is the same on SQLite and PostgreSQL."""
    if not actual:
        return [Difference(table, "no table", detail="table missing from the live database")]
    if expected != actual:
        detail = f"live columns {actual} differ from rebuilt columns {expected}"
        return [Difference(table, "columns", detail=detail)]
    cols = ", ".join(_quote(c) for c in expected)
    differences = []
    for kind, first, second in (("missing", rebuilt, live), ("unexpected", live, rebuilt)):
        rows = conn.execute(
            f"SELECT {cols} FROM {first} EXCEPT SELECT {cols} FROM {second} "
            f"ORDER BY 1 LIMIT {EXAMPLES + 1}"
        ).fetchall()
        for row in rows[:EXAMPLES]:
            differences.append(Difference(table, kind, row=dict(zip(expected, row))))
        if len(rows) > EXAMPLES:
            detail = f"more {kind} rows than the {EXAMPLES} listed"
            differences.append(Difference(table, "more", detail=detail))
    # EXCEPT compares sets; a duplicated row shows only in the counts.
    counts = [conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0] for name in (rebuilt, live)]
    if not differences and counts[0] != counts[1]:
        detail = f"live has {counts[1]} rows, rebuilt has {counts[0]}"
        differences.append(Difference(table, "count", detail=detail))
    return differences


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
