"""Run checks: runs that read as running but cannot be.

A run records its own end. A run with no end is running, unless the process that
ran it died first: then nothing could record one, and `gormes runs list` shows it
as `running` for ever. For a job's runs (subagents included: they carry the job's
id) the ledger tells: if the job is not `active`, no attempt is running them, so
they were cut off with a worker that was lost. A job's next attempt records them
as cancelled, and so does a worker's sweep for an agent job that ended dead or
cancelled (gormes/actors/agent_jobs/cut_off.py); until then they show here. A run outside a
job names its process (`run.started`): on that process's host, a process that is
gone is certain (gormes/actors/runs/process.py), and so is the cut-off; runs
whose process cannot be checked from here are counted, not judged.
"""

from __future__ import annotations

from gormes.actors.runs.process import describe, process_state, recorded_processes
from gormes.health import Check, DoctorContext, Verdict, has_table, listing, ok, warn
from gormes.health.scan import MODEL_DAYS, day



def endless_runs(ctx: DoctorContext) -> list[tuple[str, str | None]]:
    """(run id, job id or None) of every run with no end in the log (a run's end is
    its last event: messages to an ended run are refused), from the doctor's log
    summary: the runs it has seen start and not end."""
    return [(run_id, mark.job_id) for run_id, mark in ctx.log.open_runs.items()
            if mark.started]


def job_statuses(ctx: DoctorContext, job_ids: set[str]) -> dict[str, str]:
    if not job_ids or not has_table(ctx.db, "jobs"):
        return {}
    ids = sorted(job_ids)
    marks = ",".join("?" * len(ids))
    return dict(ctx.db.execute(f"SELECT id, status FROM jobs WHERE id IN ({marks})", ids).fetchall())


def check_cut_off(ctx: DoctorContext) -> Verdict:
    endless = endless_runs(ctx)
    statuses = job_statuses(ctx, {job for _, job in endless if job is not None})
    of_jobs = [(run, job, statuses[job]) for run, job in endless
               if job is not None and job in statuses and statuses[job] != "active"]
    outside = [run for run, job in endless if job is None]
    processes = recorded_processes(ctx.db, outside)
    states = {run: process_state(processes.get(run)) for run in outside}
    gone = [f"{run} ({describe(processes[run])})" for run in outside if states[run] == "gone"]
    unknown = sum(1 for run in outside if states[run] in ("elsewhere", None))
    alive = sum(1 for run in outside if states[run] == "alive")
    live = len(endless) - len(outside)
    counted = "".join((
        f"; {alive} run(s) outside a job running here" if alive else "",
        f"; {unknown} run(s) outside a job have no end and a process that cannot be checked from "
        "here (another host or container, or recorded before processes were kept): running, or "
        "killed (`gormes runs resume RUN --force` continues one whose process is gone)" if unknown else "",
    ))
    if not of_jobs and not gone:
        return ok(f"{live} run(s) of active jobs running{counted}")
    problems, fixes = [], []
    if of_jobs:
        described = [f"{run} (job {job}, {status})" for run, job, status in of_jobs]
        problems.append(f"{len(of_jobs)} run(s) of jobs no attempt is running have no end, cut off "
                        f"with a lost worker: {listing(described, 3)}")
        fixes.append("the job's next attempt records them as cancelled and continues them (a waiting "
                     "job gets one from a worker, a paused one after `gormes jobs resume JOB`); for a "
                     "dead or cancelled job a running worker records them as cut off within a lease "
                     "of its end: if they stay, start a worker (`gormes worker` or `gormes daemon`)")
    if gone:
        problems.append(f"{len(gone)} run(s) outside a job have no end and their process is gone, "
                        f"cut off (killed): {listing(gone, 3)}")
        fixes.append("`gormes runs resume RUN` records a top-level one as cut off and continues it; "
                     "a running worker or daemon on this host records them as cut off")
    return warn(
        "; ".join(problems) + f"; they read as running{counted}",
        "nothing recorded is lost: " + "; ".join(fixes),
    )


def check_cut_turns(ctx: DoctorContext) -> Verdict:
    """Model turns cut short after their requests left (`run.llm_cut`, decision
    0080) over the last 7 UTC days: the API billed each reply it began, and no run
    read it. A warning when they are a large share of the model tokens."""
    since = day(ctx.now - (MODEL_DAYS - 2) * 86_400)  # today and the 6 days before it
    days = [d for key, d in ctx.log.model_days.items() if key >= since]
    cut = sum(d.cut for d in days)
    if not cut:
        return ok("no model turn was cut short before its reply was read in the last 7 days")
    cut_tokens, read_tokens = sum(d.cut_tokens for d in days), sum(d.tokens for d in days)
    share = cut_tokens / (cut_tokens + read_tokens) if cut_tokens + read_tokens else 0.0
    runs = sorted({run for d in days for run in d.cut_runs})
    said = (f"{cut} model turn(s) cut short before their replies were read in the last 7 days, "
            f"{cut_tokens} tokens billed for them ({share:.0%} of the model tokens; "
            f"runs: {listing(runs, 3)})")
    if share < ctx.thresholds.cut_share_warn:
        return ok(said)
    return warn(
        said,
        "a run's deadline (`deadline_s`), a job's cancel or pause, or a caller cancelling its runs "
        "ends turns while the model answers: lengthen the deadlines, or find who cancels "
        "(`gormes runs show RUN` lists each cut turn)",
    )


CHECKS = [
    Check(name="runs.cut_off", category="runs", run=check_cut_off),
    Check(name="runs.cut_turns", category="runs", run=check_cut_turns),
]
