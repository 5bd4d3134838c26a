"""Ledger statements timed on two SQLite ledgers, one with an index and one without,
interleaved round by round (the order alternating), for the benchmarks that ask
what an index costs the job path's writes (live_cap_count.py, owner_list.py)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import median

from gormes.projections import ledger

# A job's row as the ledger inserts it: id, created_at, updated_at, submitter (JSON or None).
INSERT_JOB = ("INSERT INTO jobs(id, name, queue, status, priority, data, created_at, options, version,"
              " updated_at, submitter, submissions) VALUES (?, 'agent', 'default', 'waiting', 0, '{}', ?, '{}',"
              " 1, ?, ?, 1)")

Steps = dict[str, tuple[str, Callable[[int], tuple[Any, ...]]]]


def ledger_writes() -> dict[str, str]:
    """The SQL the ledger runs for each job event, by the event's class name."""
    return {t.event.__name__: w.sql for t, w in ledger._WRITES["sqlite"].items() if w is not None}


def ledger_pair(d: Path, stem: str, index: str) -> dict[str, sqlite3.Connection]:
    """Two fresh ledgers in `d`: "with" every index, "without" `index`. Durability off:
    the statements' work is measured, not the disk's."""
    import sqlite_utils

    conns: dict[str, sqlite3.Connection] = {}
    for name in ("with", "without"):
        conn = sqlite3.connect(d / f"{stem}-{name}.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=OFF")
        ledger.setup(sqlite_utils.Database(conn))
        if name == "without":
            conn.execute(f"DROP INDEX {index}")
        conns[name] = conn
    return conns


def timed_steps(conns: dict[str, sqlite3.Connection], steps: Steps, jobs: int, round_: int) -> dict[str, Any]:
    """Each step's statement over `jobs` rows, `round_` rows a transaction, on both
    ledgers in turn; us a row, the median round, and their ratio. Closes `conns`."""
    times: dict[str, dict[str, list[float]]] = {step: {"with": [], "without": []} for step in steps}
    try:
        for step, (sql, params) in steps.items():
            for start in range(0, jobs, round_):
                rows = [params(i) for i in range(start, start + round_)]
                order = ("with", "without") if (start // round_) % 2 == 0 else ("without", "with")
                for name in order:
                    conn = conns[name]
                    began = time.perf_counter()
                    conn.execute("BEGIN")
                    conn.executemany(sql, rows)
                    conn.execute("COMMIT")
                    times[step][name].append((time.perf_counter() - began) / round_)
    finally:
        for conn in conns.values():
            conn.close()
    out: dict[str, Any] = {}
    for step, by in times.items():
        with_us, without_us = median(by["with"]) * 1e6, median(by["without"]) * 1e6
        out[step] = {"with_us": round(with_us, 2), "without_us": round(without_us, 2),
                     "ratio": round(with_us / without_us, 3)}
    return out
