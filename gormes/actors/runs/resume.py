"""Resuming a run from outside a job: `gormes runs resume RUN`.

An agent job resumes its own runs (decision 0011). A run driven in the foreground
(`gormes run`, `gormes fork`, `RunManager.run`) has no job to do it: when it was
interrupted (Ctrl-C records `run.cancelled`), the operator resumes it. The new run
has `resumed_from`, replays the earlier run's recorded prefix (no model call, no
tool side effect, no token counted again) and continues live, taking over the
subagents it spawns again, as a job's next attempt would.

Refused (nothing written, but for the end of a run whose process is gone, recorded
below, which stands):
- a run of a job (the job resumes it: `gormes jobs resume JOB`), or a subagent
  (resume the top-level run; its subagents are taken over with it);
- a run that completed or failed (nothing to resume; `gormes fork` starts a new
  run from any position);
- a run with no end whose process is alive (`run.started` names the process; on
  its host that is certain: gormes/actors/runs/process.py);
- a run with no end whose process cannot be checked from here (another host or
  container, or a run recorded before processes were kept), unless `force`: the
  operator says that process is gone.
  A run with no end that is resumed (its process gone, or `force`) and its
  subagents with no end are first recorded as `run.cancelled` ("cut off"),
  unless it is in fact still being written (then the append conflicts and the
  resume is refused);
- a run already resumed (resume its continuation instead, if that was interrupted
  too: resuming the same run twice would do its live part twice);
- a run whose code no longer replays its prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gormes.actors.runs.continuation import ResumedRun, ResumeRefused, resume_run
from gormes.actors.runs.cut_off import end_cut_off_runs
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.process import describe, gone_reason, process_state
from gormes.actors.runs.recorded import split_run
from gormes.events.runs import run_stream
from gormes.events.sql_fragments import json_text
from gormes.events.store import EventStore

if TYPE_CHECKING:
    from gormes.events.audit_seal import Seal

FORCED_REASON = "cut off: its process declared gone by the operator (gormes runs resume --force)"


async def resume_from_outside(
    manager: RunManager, run_id: str, *, force: bool = False, on_start: Callable[[str], None] | None = None,
    seal: Seal | None = None,
) -> ResumedRun:
    """Resume `run_id` (see the module doc); `on_start(new_run_id)` once every check
    passed and the new run's `run.started` is durable, sealed with `seal` (the
    resuming call's audit seal, start_record.py)."""
    source = split_run(run_id, await manager.store.read_stream(run_stream(run_id)))  # UnknownRun
    started = source.started
    if started.job_id is not None:
        raise ResumeRefused(
            f"run {run_id} is an attempt of job {started.job_id}: the job resumes its runs "
            f"(gormes jobs resume {started.job_id})"
        )
    if started.parent_run_id is not None:
        raise ResumeRefused(
            f"run {run_id} is a subagent of run {started.parent_run_id}: resume that run "
            "(its subagents are taken over with it)"
        )
    later = await resumed_by(manager.store, run_id)
    if later is not None:
        raise ResumeRefused(f"run {run_id} was already resumed as run {later}: resume that one if it was interrupted")
    if source.end is None:
        process = started.process
        state = process_state(process)
        if state == "alive":
            raise ResumeRefused(
                f"run {run_id} has no end and its {describe(process)} is still running it: "
                "stop that process first (Ctrl-C records the run as cancelled)"
            )
        if state == "gone":
            reason = gone_reason(process)
        elif force:
            reason = FORCED_REASON
        else:
            where = f"its {describe(process)} cannot be checked from here" if process else \
                "it names no process (recorded before processes were kept)"
            raise ResumeRefused(
                f"run {run_id} has no end and {where}: it may still be running; if that process "
                "is gone (killed), pass --force"
            )
        if run_id not in await end_cut_off_runs(manager.store, run_id, reason):
            raise ResumeRefused(f"run {run_id} is still being written: its process is not gone")
    return await resume_run(manager, source, on_start=on_start, seal=seal)


async def resumed_by(store: EventStore, run_id: str) -> str | None:
    """The run that continues `run_id` (its `run.started` names it in `resumed_from`), if any."""

    def find(conn: Any) -> str | None:
        row = conn.execute(
            f"SELECT stream FROM events WHERE type = 'run.started' "
            f"AND {json_text(conn, '$.resumed_from.run_id')} = ? LIMIT 1", (run_id,),
        ).fetchone()
        return row[0].removeprefix("run-") if row else None

    return await store.read_sql(find)
