"""Finding the calls started with no outcome, in a log of 10,000 and of SIZE audit
records (decision 0067).

Each log holds audit records over 30 days as gormes writes them: one in 20 is a
write-ahead call (its `started` record, then its outcome naming it), the rest
one record each (`fs.read`), and OPEN calls whose outcome never came. They are
written as a gormes before 0067 wrote them (no index); then one write-ahead call
is sealed, whose `started` record builds the index from the log first (`build_ms`)
and whose outcome closes it again. Read-only, as `gormes
audit unfinished` reads, each sample times:

- gormes: `open_calls`, from the index (all open calls, and those of the last 7
  days as the doctor asks);
- scan: the code before 0067, pairing every write-ahead record of the log (or
  of the last 7 days' streams), the comparator, in the same run on the same file.

An ordinary audit record's append does not touch the index (decision 0067's
addendum: what the triggers of its first version cost is measured there).
Durability `normal` (no fsync per commit) on SQLite. Prints one JSON line; figures are
medians of SAMPLES reads, and `ratio` is the large log's median over the small
one's (1.0: the read costs the same whatever the log holds).

    BENCH_AUDIT_SIZE=1000000 .venv/bin/python benchmarks/audit_unfinished.py
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
from _common import median, progress, report, scratch_dir  # noqa: E402

from gormes.audit_export import AuditFilter, read_audit  # noqa: E402
from gormes.audit_unfinished import open_calls, unfinished  # noqa: E402
from gormes.events.audit import DAY_MS, OperationAudited, audit_stream  # noqa: E402
from gormes.events.audit_chain import append_sealed  # noqa: E402
from gormes.events.codec import default_codec  # noqa: E402
from gormes.events.sqlite import SQLiteEventStore  # noqa: E402
from gormes.events.sqlite_log import SQLiteLog  # noqa: E402
from gormes.events.store import AppendRequest  # noqa: E402

SIZES = (10_000, int(os.environ.get("BENCH_AUDIT_SIZE", "1000000")))
DAYS = 30
OPEN = 5
SAMPLES = 7
NOW = 1_796_000_000_000  # ms since the epoch: the last day's end
WEEK_AGO = NOW - 7 * DAY_MS


def audited(operation: str, outcome: str, at: int, started_position: int | None = None) -> OperationAudited:
    return OperationAudited(
        operation=operation, audit_kind=operation, caller="bench", trust="operator", allowed=True,
        outcome=outcome, duration_ms=1.5, input_sha256="0" * 64, mutating=operation != "fs.read", at=at,
        started_position=started_position,
    )


async def fill(store: SQLiteEventStore, records: int) -> None:
    """`records` audit records spread over DAYS days, OPEN of them calls left open."""
    per_day = records // DAYS
    for day in range(DAYS):
        start = NOW - (DAYS - day) * DAY_MS
        events: list[OperationAudited] = []
        written = 0
        while written < per_day:
            at = start + written * (DAY_MS // per_day)
            if written % 20 == 0 and written + 1 < per_day:
                if events:
                    await store.append(audit_stream(at), events)
                    events = []
                started = (await store.append(audit_stream(at), [audited("knowledge.write", "started", at)]))
                if not (day % 6 == 0 and written == 0):  # OPEN calls (days 0, 6, 12, 18, 24) never end
                    events.append(audited("knowledge.write", "ok", at + 1, started_position=started.first_position))
                written += 2
            else:
                events.append(audited("fs.read", "ok", at))
                written += 1
            if len(events) >= 5000:
                await store.append(audit_stream(at), events)
                events = []
        if events:
            await store.append(audit_stream(start), events)


def timed(path: Path, read: Callable[[Any], list[Any]]) -> tuple[float, int]:
    """The median time of `read` on a read-only connection (as the CLI opens one), and what it found."""
    conn = SQLiteLog(path, readonly=True, create=False).conn
    try:
        times, found = [], 0
        for _ in range(SAMPLES):
            start = time.perf_counter()
            found = len(read(conn))
            times.append(time.perf_counter() - start)
        return median(times), found
    finally:
        conn.close()


def scan(conn: Any, since_ms: int | None = None) -> list[Any]:
    return unfinished(read_audit(conn, AuditFilter(since_ms=since_ms, write_ahead=True), default_codec))


async def main() -> None:
    results: dict[str, dict[int, float]] = {k: {} for k in ("gormes", "scan", "gormes_week", "scan_week", "build")}
    found: dict[int, int] = {}
    with scratch_dir() as d:
        for size in SIZES:
            path = d / f"audit-{size}.db"
            progress(f"audit_unfinished: writing {size} audit records ...")
            async with SQLiteEventStore.open(path, durability="normal") as store:
                await fill(store, size)
                # this process's first write-ahead record builds the index from the log;
                # its outcome's seal then takes the row out again
                start = time.perf_counter()
                [started] = await append_sealed(
                    store, AppendRequest(audit_stream(NOW), [audited("knowledge.write", "started", NOW)]))
                results["build"][size] = time.perf_counter() - start
                await append_sealed(store, AppendRequest(audit_stream(NOW), [
                    audited("knowledge.write", "ok", NOW + 1, started_position=started.first_position)]))
            progress(f"audit_unfinished: reading {size} ...")
            results["gormes"][size], found[size] = timed(path, lambda c: open_calls(c, default_codec))
            results["scan"][size], scanned = timed(path, scan)
            results["gormes_week"][size], _ = timed(path, lambda c: open_calls(c, default_codec, WEEK_AGO))
            results["scan_week"][size], _ = timed(path, lambda c: scan(c, WEEK_AGO))
            assert found[size] == scanned == OPEN, (found[size], scanned)
    small, large = SIZES

    def ms(name: str) -> dict[str, float]:
        return {str(n): round(results[name][n] * 1000, 3) for n in SIZES}

    report({
        "benchmark": "audit_unfinished",
        "audit_records": list(SIZES),
        "open_calls": OPEN,
        "gormes_ms": ms("gormes"),
        "scan_ms": ms("scan"),
        "ratio": round(results["gormes"][large] / results["gormes"][small], 2),
        "scan_ratio": round(results["scan"][large] / results["scan"][small], 2),
        "gormes_week_ms": ms("gormes_week"),
        "scan_week_ms": ms("scan_week"),
        "build_ms": {str(n): round(results["build"][n] * 1000, 1) for n in SIZES},
        "samples": SAMPLES,
    })


if __name__ == "__main__":
    trio.run(main)
