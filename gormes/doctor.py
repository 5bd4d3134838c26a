"""The doctor: runs every health check and sums them up.

    report = run_doctor(Path("gormes.db"), offline=False)
    report = run_doctor("postgresql://db.internal/gormes")
    report.status        # "ok", "warnings" or "error"; exit_code(report) is 0, 0, 1

Checks live in gormes/health (one module per category). The database is only
read, through a read-only connection (on PostgreSQL a session whose every
transaction is READ ONLY). A check of one backend only is skipped on the other
with its reason (`Check.elsewhere`), or, for PostgreSQL's replacements of SQLite
checks, not run on SQLite. `offline=True` skips the checks that are
about live processes (`needs_daemon`): worker heartbeats, wedged queues and
projection lag only mean something while a daemon is supposed to be running.
A check that raises is reported as a `fail` naming the exception, so the doctor
itself never hides a problem behind a traceback.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Container, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import msgspec

from gormes.actors.runs.context import run_handlers as registered_run_handlers
from gormes.events.catalog import load_all
from gormes.events.codec import default_codec
from gormes.events.open import is_postgres_url
from gormes.health import (
    Check,
    Detail,
    DoctorContext,
    Status,
    Thresholds,
    Verdict,
    audit,
    disk,
    fail,
    gateway,
    memory,
    module_exists,
    operations,
    postgres,
    projections,
    providers,
    queue,
    replay,
    retention,
    runs,
    scan,
    skills,
    store,
    workers,
)
from gormes.tools.builtin import default_registry

if TYPE_CHECKING:
    from gormes.ops.spec import OperationSpec

SCHEMA_VERSION = 1
Overall = Literal["ok", "warnings", "error"]
EXIT_CODES: dict[str, int] = {"ok": 0, "warnings": 0, "error": 1}

SCHEMA_CHECK = "store.schema"


class CheckResult(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    category: str
    status: Status
    message: str
    remediation: str = ""  # empty when ok
    detail: Detail = msgspec.UNSET  # left out of the JSON when the check has none


class SkippedCheck(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    category: str
    reason: str


class DoctorReport(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int = SCHEMA_VERSION
    status: Overall
    database: str
    offline: bool
    checked_at: float  # seconds since the epoch
    checks: list[CheckResult]
    skipped: list[SkippedCheck]


def all_checks() -> list[Check]:
    """Every check after `store.schema` (which `run_doctor` runs first, as the gate)."""
    return [
        *store.CHECKS, *projections.CHECKS, *queue.CHECKS, *workers.CHECKS,
        *operations.CHECKS, *replay.CHECKS, *runs.CHECKS, *disk.CHECKS, *postgres.CHECKS, *memory.CHECKS,
        *skills.CHECKS, *audit.CHECKS, *providers.CHECKS, *gateway.CHECKS,
        *retention.CHECKS,
    ]


def overall(results: Sequence[CheckResult]) -> Overall:
    statuses = {r.status for r in results}
    if "fail" in statuses:
        return "error"
    return "warnings" if "warn" in statuses else "ok"


def exit_code(report: DoctorReport) -> int:
    return EXIT_CODES[report.status]


def run_doctor(
    path: Path | str,
    *,
    offline: bool = False,
    now: float | None = None,
    thresholds: Thresholds | None = None,
    operations_: Sequence[OperationSpec] | None = None,
    run_handlers: Container[str] | None = None,
    statvfs: Callable[[str], os.statvfs_result] = os.statvfs,
    modules: Callable[[str], bool] = module_exists,
    checks: Sequence[Check] | None = None,
    mcp_config: Path | str | None = None,
    full: bool = False,
) -> DoctorReport:
    """Run the checks against the database at `path` (an SQLite file, or a
    PostgreSQL URL); the defaults are the real registries, clock and filesystem
    (tests inject their own). `mcp_config`: an MCP configuration file whose servers
    are checked too (gormes/health/mcp.py; a bad file raises its one-line error).

    The log-wide checks read a summary folded from where the last run left off
    (gormes/health/scan.py), kept in the database after the checks (the SQLite
    file, or the PostgreSQL schema, when it can be written); `full` folds the
    whole log and runs the whole-file checks (`PRAGMA quick_check`, every audit
    day)."""
    load_all()
    if mcp_config is not None:
        # Lazy for start-up time: the mcp SDK is loaded only when servers are checked.
        from gormes.health.mcp import mcp_checks
        from gormes.tools.mcp.config import load_config

        checks = [*(all_checks() if checks is None else checks), *mcp_checks(load_config(mcp_config))]
    if operations_ is None:
        operations_ = default_registry().list()
    if run_handlers is None:
        run_handlers = registered_run_handlers
    if is_postgres_url(path):
        # Lazy for start-up time: psycopg is loaded only for a PostgreSQL URL.
        from gormes.events.postgres_schema import redact

        backend, database, file = "postgres", redact(str(path)), None
        conn, schema = postgres.open_database(str(path))
    else:
        backend, file = "sqlite", Path(path)
        database = str(file)
        conn, schema = store.open_database(file)
    remembered = None if full or conn is None else scan.load(conn)
    ctx = DoctorContext(
        path=file, conn=conn, now=time.time() if now is None else now,
        thresholds=thresholds or Thresholds(), codec=default_codec, operations=operations_,
        run_handlers=run_handlers, statvfs=statvfs, module_exists=modules, backend=backend,
        remembered=remembered, full=full or remembered is None,
    )
    results = [_result(SCHEMA_CHECK, "store", schema)]
    skipped = []
    try:
        for check in all_checks() if checks is None else checks:
            if check.backend == "postgres" and backend != "postgres":
                continue  # a replacement of an SQLite check
            if check.backend is not None and check.backend != backend:
                skipped.append(SkippedCheck(
                    name=check.name, category=check.category,
                    reason=f"not on PostgreSQL: {check.elsewhere}",
                ))
            elif offline and (check.needs_daemon or check.offline_skip):
                skipped.append(SkippedCheck(
                    name=check.name, category=check.category,
                    reason=check.offline_skip or "needs a running daemon (--offline)",
                ))
            elif check.needs_database and conn is None:
                skipped.append(SkippedCheck(
                    name=check.name, category=check.category,
                    reason=f"the database cannot be read ({SCHEMA_CHECK})",
                ))
            else:
                results.append(_result(check.name, check.category, _run(check, ctx)))
    finally:
        if conn is not None:
            conn.close()
    if "log" in ctx.__dict__:  # folded (cached_property): keep it
        scan.save(str(path) if file is None else file, ctx.log)
    return DoctorReport(
        status=overall(results), database=database, offline=offline, checked_at=ctx.now,
        checks=results, skipped=skipped,
    )


def _run(check: Check, ctx: DoctorContext) -> Verdict:
    try:
        return check.run(ctx)
    except Exception as exc:  # noqa: BLE001 - a broken check is reported, not raised
        _end_failed_transaction(ctx)
        return fail(
            f"the check itself failed: {type(exc).__name__}: {exc}",
            "the database may be damaged or locked; run `gormes doctor` again, and report "
            "the message if it persists",
        )


def _end_failed_transaction(ctx: DoctorContext) -> None:
    """On PostgreSQL, a check that failed inside a transaction leaves it aborted
    (every later statement would fail): roll it back so the next check runs."""
    conn = ctx.conn
    if ctx.backend == "postgres" and conn is not None and not conn.closed:
        try:
            conn.execute("ROLLBACK")
        except Exception:  # noqa: BLE001, S110 - no transaction open: nothing to end
            pass


def _result(name: str, category: str, verdict: Verdict) -> CheckResult:
    return CheckResult(
        name=name, category=category, status=verdict.status, message=verdict.message,
        remediation=verdict.remediation, detail=verdict.detail,
    )
