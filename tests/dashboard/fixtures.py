"""A hand-built Snapshot for the rendering and key tests (fixed data, no database)."""

from __future__ import annotations

from gormes.dashboard.model import (
    GovernorState,
    JobRow,
    RunRow,
    Snapshot,
    WorkerRow,
    count_statuses,
)
from gormes.events.jobs import Tokens

ACTIVE = "01JOBACTIVE000000000000000"
WAITING = "01JOBWAITING00000000000000"
PAUSED = "01JOBPAUSED000000000000000"
DEAD = "01JOBDEAD00000000000000000"
RUN = "01RUNACTIVE000000000000000"
CHILD = "01RUNCHILD0000000000000000"


def fixed_snapshot(selected: str | None = ACTIVE) -> Snapshot:
    by_status, by_queue = count_statuses([
        ("default", "active", 1), ("default", "waiting", 3), ("fast", "paused", 2),
        ("fast", "dead", 1),
    ])
    jobs = (
        JobRow(id=ACTIVE, name="agent", queue="default", status="active", attempts_made=0,
               max_attempts=3, progress='{"step":2}', tokens=Tokens(input=1200, output=345),
               cost=0.0123, worker_id="w-1", run_id=RUN, last_tool="fs.read"),
        JobRow(id=WAITING, name="echo", queue="default", status="waiting", max_attempts=3),
        JobRow(id=PAUSED, name="echo", queue="fast", status="paused", max_attempts=3),
        JobRow(id=DEAD, name="agent", queue="fast", status="dead", attempts_made=3, max_attempts=3,
               run_id="01RUNDEAD", cost=None, error="boom"),
    )
    runs = (
        RunRow(run_id=RUN, handler="agent", status="running", model="gpt-x", job_id=ACTIVE,
               iterations=4, tokens=Tokens(input=1200, output=345), cost=0.0123,
               last_tool="fs.read", progress='"reading notes"'),
        RunRow(run_id=CHILD, handler="agent", status="running", depth=1, model="local-y",
               job_id=ACTIVE, parent_run_id=RUN, iterations=1, tokens=Tokens(input=10, output=5),
               cost=None, last_tool="fs.grep"),
    )
    workers = (
        WorkerRow(worker_id="w-1", alive=True, last_seen_s_ago=2.0, pid=4242, concurrency=8,
                  active_jobs=1, governor=GovernorState(limit=4, cpu_percent=93.0, memory_percent=50.0)),
        WorkerRow(worker_id="w-old", alive=False, last_seen_s_ago=600.0, pid=7, concurrency=2),
    )
    return Snapshot(
        taken_at=1_700_000_000.0, head=321, by_status=by_status, by_queue=by_queue, jobs=jobs,
        runs=runs, workers=workers, tokens=Tokens(input=1210, output=350, cache_read=100),
        breaker_trips=2, selected=selected,
    )
