"""The doctor's checks, one module per category, and the types they share.

A check is a plain function `(DoctorContext) -> Verdict`: it reads the database
(read-only; an SQLite file or a PostgreSQL schema: the SQL is shared, with
`gormes.events.sql_fragments` for what differs) and the process's registries and says `ok`, `warn` or `fail`, with a
one-line message and, when not ok, a remediation. The runner (gormes/doctor.py)
names the results, skips what `--offline` excludes and turns a crashed check
into a `fail`, so a check function stays a few lines of SQL and a judgement.

Every threshold lives in `Thresholds` and is documented in docs/doctor.md.
"""

from __future__ import annotations

import fnmatch
import os
import sqlite3
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import msgspec

from gormes.events.sql_fragments import glob
from gormes.health.scan import LogSummary, fold_log, split_key
from gormes.projections.bookkeeping import has_table as has_table  # re-exported: the checks' import

if TYPE_CHECKING:
    from gormes.events.codec import Codec
    from gormes.ops.spec import OperationSpec

Status = Literal["ok", "warn", "fail"]
CATEGORIES = (
    "store", "projections", "queue", "workers", "operations", "replay", "runs", "disk",
    "memory", "skills", "audit", "mcp", "providers", "gateway",
)

MIB = 1024 * 1024
GIB = 1024 * MIB


# A check's figures for scripts (`--json`'s `detail`), beside its message; most have none.
Detail = dict[str, object] | msgspec.UnsetType


class Verdict(msgspec.Struct, frozen=True):
    status: Status
    message: str
    remediation: str = ""
    detail: Detail = msgspec.UNSET


def ok(message: str, detail: Detail = msgspec.UNSET) -> Verdict:
    return Verdict("ok", message, detail=detail)


def warn(message: str, remediation: str, detail: Detail = msgspec.UNSET) -> Verdict:
    return Verdict("warn", message, remediation, detail)


def fail(message: str, remediation: str) -> Verdict:
    return Verdict("fail", message, remediation)


class Thresholds(msgspec.Struct, frozen=True, kw_only=True):
    projection_lag_warn: int = 1000  # events behind the head
    stall_grace_ms: int = 15_000  # as the worker's stall sweep (WorkerConfig.stall_grace_ms)
    oldest_waiting_warn_s: float = 3600.0
    queue_depth_warn: int = 10_000  # waiting jobs in one queue
    wedged_after_s: float = 15 * 60.0  # no completion for this long
    heartbeat_stale_s: float = 30.0  # six missed beats at the worker's default 5 s
    crashed_worker_window_s: float = 24 * 3600.0
    breaker_window_s: float = 24 * 3600.0
    disk_fail_bytes: int = 100 * MIB
    disk_warn_bytes: int = GIB
    disk_warn_fraction: float = 0.10
    gateway_refusals_window_s: float = 24 * 3600.0  # the gateways' refused calls counted
    cut_share_warn: float = 0.10  # of the model tokens of the last 7 days, billed for replies cut short


def module_exists(name: str) -> bool:
    """Whether this installation has a module (a part of gormes) called `name`."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


@dataclass(frozen=True, kw_only=True)
class DoctorContext:
    """What every check may read. `conn` is a read-only connection (None when the
    database could not be opened: only checks with `needs_database=False` run)."""

    path: Path | None  # the SQLite file; None on PostgreSQL
    conn: sqlite3.Connection | None  # or a PortableConnection (PostgreSQL)
    now: float  # seconds since the epoch
    thresholds: Thresholds
    codec: Codec
    operations: Sequence[OperationSpec]
    run_handlers: Container[str]
    statvfs: Callable[[str], os.statvfs_result] = os.statvfs
    module_exists: Callable[[str], bool] = module_exists
    backend: str = "sqlite"  # or "postgres"
    # What the last doctor run folded of the log (gormes/health/scan.py); None:
    # fold from position 0. `full`: the whole-file checks run too (--full).
    remembered: LogSummary | None = None
    full: bool = True

    @cached_property
    def log(self) -> LogSummary:
        """The log summary, brought up to the head (once per doctor run)."""
        start = LogSummary() if self.remembered is None else self.remembered
        return fold_log(self.db, start, self.reads)

    def reads(self, type_: str, type_version: int) -> bool:
        """Whether this gormes decodes events of this type and version."""
        cls = self.codec.class_for(type_)
        return cls is not None and type_version <= cls.schema_version

    @property
    def db(self) -> sqlite3.Connection:
        assert self.conn is not None, "a check that needs the database ran without one"
        return self.conn

    @property
    def now_ms(self) -> int:
        return int(self.now * 1000)


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str  # "<category>.<what>", stable: scripts match on it
    category: str
    run: Callable[[DoctorContext], Verdict]
    needs_daemon: bool = False  # skipped with --offline
    offline_skip: str = ""  # skipped with --offline too, for this reason (it starts a process, say)
    needs_database: bool = True
    # Checks of one backend only: "sqlite" ones are skipped on PostgreSQL with
    # `elsewhere` as the reason; "postgres" ones (their replacements) do not run
    # on SQLite.
    backend: str | None = None
    elsewhere: str = ""


def count_events(conn: sqlite3.Connection, type_glob: str) -> int:
    return conn.execute(f"SELECT count(*) FROM events WHERE {glob(conn, 'type', type_glob)}").fetchone()[0]


def counted(ctx: DoctorContext, type_glob: str) -> int:
    """Events whose type matches `type_glob`, from the log summary (no scan)."""
    return sum(n for key, n in ctx.log.types.items() if fnmatch.fnmatchcase(split_key(key)[0], type_glob))


def listing(items: Sequence[str], limit: int = 5) -> str:
    """`a, b, c and 4 more`."""
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def size(n: int) -> str:
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    if n < MIB:
        return f"{n / 1024:.0f} KiB"
    return f"{n / MIB:.0f} MiB"
