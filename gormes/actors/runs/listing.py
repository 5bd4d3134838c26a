"""The rows of `gormes runs list`: the `runs` projection (caught up first), newest
first, filtered, each run with no end marked with what became of its process.

    async with open_store(path) as store:
        rows = await list_runs(store, status="running", top_level=True, limit=20)
"""

from __future__ import annotations

from typing import Any, get_args

from gormes.events.runs import RunStatus
from gormes.events.store import EventStore
from gormes.projections.runs import COLUMNS, TABLE
from gormes.projections.runs import runs as projection

RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)  # the Literal run events are typed with


async def list_runs(store: EventStore, **filters: Any) -> list[dict[str, Any]]:
    """`select_runs(**filters)` on `store`, its `runs` projection caught up first."""
    # lazy: the runner imports trio, which `gormes runs list`'s quick read (select_runs
    # on a current file, no event loop) must not load
    from gormes.projections.runner import ProjectionRunner

    await ProjectionRunner(store, projection).catch_up()
    return await store.read_sql(lambda conn: select_runs(conn, **filters))


def select_runs(
    conn: Any,
    *,
    status: str | None = None,
    job_id: str | None = None,
    handler: str | None = None,
    top_level: bool = False,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """Rows of the `runs` projection as it is (its columns, and `process`: "alive",
    "gone" or "elsewhere" for a run with no end, else None), newest first, at most
    `limit`; `conn` runs `?` SQL on SQLite or PostgreSQL."""
    from gormes.actors.runs.process import OPEN_STATUSES, process_state, recorded_processes

    where, params = [], []
    for column, value in (("status", status), ("job_id", job_id), ("handler", handler)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if top_level:
        where.append("parent_run_id IS NULL")
    sql = (f"SELECT {', '.join(COLUMNS)} FROM {TABLE}"
           + (f" WHERE {' AND '.join(where)}" if where else "")
           + " ORDER BY started_at DESC, run_id DESC LIMIT ?")
    rows = [dict(zip(COLUMNS, row)) for row in conn.execute(sql, (*params, limit)).fetchall()]
    processes = recorded_processes(conn, [r["run_id"] for r in rows if r["status"] in OPEN_STATUSES])
    for r in rows:
        r["process"] = process_state(processes.get(r["run_id"])) if r["status"] in OPEN_STATUSES else None
    return rows
