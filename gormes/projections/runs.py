"""The `runs` projection: one row per agent run, folded from the `run.*` events.

    run_id, parent_run_id, job_id, handler, handler_version, model, status, depth,
    started_at, finished_at, iterations (model turns), tokens_input, tokens_output,
    tokens_cache_read (the run's total, awaited children's included), last_tool, error,
    host, pid (the process that drives it; NULL in runs recorded before it was kept)

Times are the events' `recorded_at`, so a rebuild gives the same rows.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from gormes.events.base import Recorded
from gormes.events.runs import (
    RunCancelled,
    RunChildFinished,
    RunCompleted,
    RunFailed,
    RunLlmCut,
    RunLlmFailed,
    RunLlmTurn,
    RunResumed,
    RunStarted,
    RunSuspended,
    RunTokensAdded,
    RunToolCalled,
)

from gormes.projections.schema import Index, Schema, Table, replace_sql

if TYPE_CHECKING:
    import sqlite_utils

TABLE = "runs"

COLUMNS = (
    "run_id", "parent_run_id", "job_id", "handler", "handler_version", "model", "status",
    "depth", "started_at", "finished_at", "iterations", "tokens_input", "tokens_output",
    "tokens_cache_read", "last_tool", "error", "host", "pid",
)

# A run started again (the same run id) replaces its row, as INSERT OR REPLACE did.
_INSERT = replace_sql(
    TABLE, COLUMNS, "run_id", "?, ?, ?, ?, ?, ?, 'running', ?, ?, NULL, 0, 0, 0, 0, NULL, NULL, ?, ?"
)
_ADD_TOKENS = (
    f"UPDATE {TABLE} SET tokens_input = tokens_input + ?, tokens_output = tokens_output + ?, "
    "tokens_cache_read = tokens_cache_read + ? WHERE run_id = ?"
)


SCHEMA = Schema(
    tables=(
        Table(
            TABLE,
            {
                "run_id": str, "parent_run_id": str, "job_id": str, "handler": str,
                "handler_version": str, "model": str, "status": str, "depth": int,
                "started_at": float, "finished_at": float, "iterations": int,
                "tokens_input": int, "tokens_output": int, "tokens_cache_read": int,
                "last_tool": str, "error": str, "host": str, "pid": int,
            },
            "run_id",
            frozenset({"handler", "status", "depth", "started_at", "iterations"}),
        ),
    ),
    indexes=(Index(TABLE, ("parent_run_id",)), Index(TABLE, ("status",))),
)


class RunsProjection:
    name = "runs"
    version = 2  # 2: host, pid
    tables = (TABLE,)
    types = ("run.*",)
    schema = SCHEMA

    def setup(self, db: sqlite_utils.Database) -> None:
        SCHEMA.create_sqlite(db)

    def apply(self, conn: sqlite3.Connection, records: list[Recorded]) -> None:
        for r in records:
            if not r.stream.startswith("run-"):
                continue
            run_id, e = r.stream[4:], r.event
            if isinstance(e, RunStarted):
                conn.execute(_INSERT, (
                    run_id, e.parent_run_id, e.job_id, e.handler, e.handler_version, e.model,
                    e.depth, r.recorded_at, e.process.host if e.process else None,
                    e.process.pid if e.process else None,
                ))
            elif isinstance(e, RunLlmTurn):
                conn.execute(f"UPDATE {TABLE} SET iterations = iterations + 1 WHERE run_id = ?", (run_id,))
                conn.execute(_ADD_TOKENS, (e.usage.input, e.usage.output, e.usage.cache_read, run_id))
            elif isinstance(e, (RunLlmFailed, RunLlmCut)) and e.usage is not None:
                conn.execute(_ADD_TOKENS, (e.usage.input, e.usage.output, e.usage.cache_read, run_id))
            elif isinstance(e, RunTokensAdded):
                conn.execute(_ADD_TOKENS, (e.input, e.output, e.cache_read, run_id))
            elif isinstance(e, RunChildFinished):
                conn.execute(_ADD_TOKENS, (e.tokens.input, e.tokens.output, e.tokens.cache_read, run_id))
            elif isinstance(e, RunToolCalled):
                conn.execute(f"UPDATE {TABLE} SET last_tool = ? WHERE run_id = ?", (e.operation, run_id))
            elif isinstance(e, (RunCompleted, RunFailed, RunCancelled)):
                status = {RunCompleted: "completed", RunFailed: "failed", RunCancelled: "cancelled"}[type(e)]
                error = e.error if isinstance(e, RunFailed) else e.reason if isinstance(e, RunCancelled) else None
                conn.execute(
                    f"UPDATE {TABLE} SET status = ?, finished_at = ?, error = ? WHERE run_id = ?",
                    (status, r.recorded_at, error, run_id),
                )
            elif isinstance(e, RunSuspended):
                conn.execute(f"UPDATE {TABLE} SET status = 'suspended' WHERE run_id = ?", (run_id,))
            elif isinstance(e, RunResumed):
                conn.execute(f"UPDATE {TABLE} SET status = 'running' WHERE run_id = ?", (run_id,))


runs = RunsProjection()
