"""Reading one `Snapshot` out of the projection tables, in one read transaction.

    snapshot = await read_snapshot(store, pricing=load_table())   # either store

The SQL is shared by SQLite and PostgreSQL (JSON access through
`gormes.events.sql_fragments`; on PostgreSQL one REPEATABLE READ snapshot).
Tables: `jobs` (the ledger), `runs` (the runs projection; `gormes top` catches it
up before reading), `worker_heartbeats`, and the `events` table by stream (so by
index) for the model turns of the runs and jobs shown, to price them as every
command does (`gormes.actors.runs.costs`, `gormes.actors.agent_jobs.costs`), and
the ledger's per-model totals (`model_tokens`, a row per model) for what every
job spent and wasted together. A table that does not exist yet reads as empty.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import msgspec

from gormes.actors.agent_jobs.costs import job_costs, ledger_costs
from gormes.actors.runs.costs import run_costs
from gormes.actors.runs.process import OPEN_STATUSES, process_state, recorded_processes
from gormes.dashboard.gateway import gateway_calls
from gormes.dashboard.model import (
    JobRow,
    RunRow,
    Snapshot,
    count_statuses,
    order_jobs,
    preview,
    worker_row,
)
from gormes.dashboard.providers import provider_rows
from gormes.events.jobs import TERMINAL, Tokens
from gormes.events.postgres_sql import POSTGRES, dialect_of
from gormes.events.sql_fragments import json_value
from gormes.events.store import EventStore
from gormes.projections.ledger import BREAKER_KILLED, LIVE_JOBS
from gormes.providers.pricing import PricingTable

JOBS_LIMIT = 200  # live jobs are all shown up to this; terminal ones fill the rest
RECENT_DONE = 50
_decode = msgspec.json.Decoder()

_JOB_COLUMNS = (
    "id, name, queue, status, priority, attempts_made, max_attempts, progress, tokens_input,"
    " tokens_output, tokens_cache_read, tokens_cache_write, tokens_reasoning, worker_id, error, created_at,"
    " coalesce(updated_at, created_at)"
)
_RUN_COLUMNS = (
    "run_id, handler, status, depth, model, job_id, parent_run_id, started_at, iterations,"
    " tokens_input, tokens_output, tokens_cache_read, last_tool"
)


def _tables(conn: sqlite3.Connection) -> set[str]:
    if dialect_of(conn) == POSTGRES:
        sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    return {r[0] for r in conn.execute(sql)}


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return _decode.decode(text)
    except msgspec.DecodeError:
        return text


_TERMINAL = tuple(sorted(TERMINAL))


def _marks(values: tuple[str, ...] | list[str]) -> str:
    return ",".join("?" * len(values))


def _jobs(conn: sqlite3.Connection, counts: list[tuple[str, str, int]]) -> list[tuple[Any, ...]]:
    """The live jobs, newest first (the partial index `jobs_unended`: its WHERE is
    written out, as SQLite matches a partial index only to the same text), then
    the latest finished ones: each (status, queue) of `counts` read newest first
    from `jobs_status` and merged, so neither read walks the drained ledger."""
    live = conn.execute(
        f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {LIVE_JOBS} ORDER BY created_at DESC, id DESC LIMIT ?",
        (JOBS_LIMIT,),
    ).fetchall()
    done: list[tuple[Any, ...]] = []
    for queue, status, _ in counts:
        if status in TERMINAL:
            done += conn.execute(
                f"SELECT {_JOB_COLUMNS}, finished_at FROM jobs WHERE status = ? AND queue = ?"
                " ORDER BY finished_at DESC LIMIT ?", (status, queue, RECENT_DONE),
            ).fetchall()
    done.sort(key=lambda row: (row[-1] or 0, row[0]), reverse=True)
    return live + [row[:-1] for row in done[:RECENT_DONE]]


def _runs(conn: sqlite3.Connection, job_ids: list[str]) -> list[tuple[Any, ...]]:
    """Active runs, and every run of the jobs shown (to give the jobs their run)."""
    where = f"status IN ({_marks(OPEN_STATUSES)})"
    if job_ids:
        where += f" OR job_id IN ({_marks(job_ids)})"
    return conn.execute(
        f"SELECT {_RUN_COLUMNS} FROM runs WHERE {where} ORDER BY started_at, run_id",
        (*OPEN_STATUSES, *job_ids),
    ).fetchall()


def _progress(conn: sqlite3.Connection, run_ids: list[str]) -> dict[str, Any]:
    """The latest `run.progress` of each run."""
    found: dict[str, Any] = {}
    for run_id in run_ids:
        row = conn.execute(
            f"SELECT {json_value(conn, '$.progress')} FROM events WHERE stream = ?"
            " AND type = 'run.progress' ORDER BY version DESC LIMIT 1", (f"run-{run_id}",),
        ).fetchone()
        if row is not None:
            found[run_id] = _json(row[0]) if isinstance(row[0], str) and row[0][:1] in "[{" else row[0]
    return found


def snapshot_from(conn: sqlite3.Connection, now: float, pricing: PricingTable) -> Snapshot:
    """Read everything the dashboard shows (blocking; one read transaction)."""
    postgres = dialect_of(conn) == POSTGRES
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if postgres else "BEGIN")
    try:
        return _snapshot(conn, now, pricing)
    finally:
        conn.execute("COMMIT")


def _snapshot(conn: sqlite3.Connection, now: float, pricing: PricingTable) -> Snapshot:
    tables = _tables(conn)
    head = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
    counts: list[tuple[str, str, int]] = []
    job_rows: list[tuple[Any, ...]] = []
    breaker_trips = 0
    active_by_worker: dict[str, int] = {}
    if "jobs" in tables:
        counts = conn.execute("SELECT queue, status, count(*) FROM jobs GROUP BY queue, status").fetchall()
        job_rows = _jobs(conn, counts)
        breaker_trips = conn.execute(f"SELECT count(*) FROM jobs WHERE {BREAKER_KILLED}").fetchone()[0]
        active_by_worker = dict(conn.execute(
            "SELECT worker_id, count(*) FROM jobs WHERE status = 'active' AND worker_id IS NOT NULL"
            " GROUP BY worker_id"
        ).fetchall())
    totals = ledger_costs(conn, pricing) if "model_tokens" in tables else None  # a row per model
    run_rows = _runs(conn, [r[0] for r in job_rows]) if "runs" in tables else []
    active_runs = [r for r in run_rows if r[2] in OPEN_STATUSES]
    costs = run_costs(conn, [r[0] for r in active_runs], pricing)
    costs_of_jobs = job_costs(conn, [r[0] for r in job_rows], pricing)
    progress = _progress(conn, [r[0] for r in active_runs])
    processes = recorded_processes(conn, [r[0] for r in active_runs])

    top_run: dict[str, tuple[Any, ...]] = {}
    for r in run_rows:
        if r[5] is not None and r[6] is None:
            top_run[r[5]] = r  # the latest top-level run of the job (ordered by start)

    jobs = []
    for (job_id, name, queue, status, priority, made, max_attempts, job_progress, ti, to, tc, tw, tr,
         worker_id, error, created_at, updated_at) in job_rows:
        run = top_run.get(job_id)
        jobs.append(JobRow(
            id=job_id, name=name, queue=queue, status=status, priority=priority or 0,
            attempts_made=made or 0, max_attempts=max_attempts or 0,
            progress=preview(_json(job_progress)),
            tokens=Tokens(input=ti or 0, output=to or 0, cache_read=tc or 0, cache_write=tw or 0,
                          reasoning=tr or 0),
            cost=costs_of_jobs.get(job_id),
            worker_id=worker_id, run_id=run[0] if run else None,
            last_tool=run[12] if run else None, error=error,
            created_at=created_at or 0, updated_at=updated_at or 0,
        ))
    by_status, by_queue = count_statuses(counts)
    return Snapshot(
        taken_at=now, head=head, by_status=by_status, by_queue=by_queue,
        jobs=order_jobs(jobs),
        runs=tuple(
            RunRow(
                run_id=r[0], handler=r[1], status=r[2], depth=r[3] or 0, model=r[4], job_id=r[5],
                parent_run_id=r[6], started_at=r[7] or 0.0, iterations=r[8] or 0,
                tokens=Tokens(input=r[9] or 0, output=r[10] or 0, cache_read=r[11] or 0),
                cost=costs.get(r[0], 0.0 if not r[8] else None), last_tool=r[12],
                progress=preview(progress.get(r[0])),
                process=process_state(processes.get(r[0])),
            )
            for r in active_runs
        ),
        workers=tuple(_workers(conn, now, active_by_worker) if "worker_heartbeats" in tables else ()),
        providers=provider_rows(conn, now, tables), gateway=gateway_calls(conn, now),
        tokens=totals.spent if totals else Tokens(), breaker_trips=breaker_trips,
        wasted=totals.wasted if totals else Tokens(), cost=totals.cost if totals else None,
        wasted_cost=totals.wasted_cost if totals else None, pricing=pricing.version,
    )


def _workers(conn: sqlite3.Connection, now: float, active: dict[str, int]) -> list[Any]:
    rows = conn.execute(
        "SELECT worker_id, pid, host, info, last_seen, stopped_at FROM worker_heartbeats"
        " ORDER BY stopped_at IS NOT NULL, last_seen DESC, worker_id"
    ).fetchall()
    return [
        worker_row(worker_id=w, pid=pid, host=host, info=_json(info), last_seen=last_seen,
                   stopped_at=stopped_at, now=now, active_jobs=active.get(w, 0))
        for w, pid, host, info, last_seen, stopped_at in rows
    ]


async def read_snapshot(store: EventStore, *, pricing: PricingTable, now: float | None = None) -> Snapshot:
    """A Snapshot from `store` (SQLite or PostgreSQL), priced with `pricing`."""
    when = time.time() if now is None else now
    return await store.read_sql(lambda conn: snapshot_from(conn, when, pricing))
