"""The job path of benchmarks/concurrency.py: N `agent` jobs in flight on one worker.

N jobs, each the benchmark's agent run (5 tool turns and a final one on the
scripted model), are submitted to a fresh database; then one `gormes worker
--concurrency N --lease LEASE_MS` process drains them. The lease is the
product's default (30 s, `DEFAULT_LEASE_MS`: renewed every 15 s); the worker's
own stall sweep (every `--stall-interval`) would record `job.stalled` for a
lease it failed to renew in time. A renewal is one `job.lease_renewed` event a
job, so N jobs need N x 2 / lease_s of them a second (`renewals_per_s`): 10,000
at a 2 s lease is more than this machine records, and leases are lost. Measured:
the wall from the worker's start until every job is completed (its start-up
included), steps/s, the wall against the ideal (the turns' delays alone), the
worker's peak RSS and CPU (`worker_cpu_s`, its whole life, start-up included;
`cpu_us_per_step`: that over the steps), the stalls recorded while the worker
was alive (target: none), and `renewal_gap_ms`: p50/p99/max of the gaps between a job's claim, its
renewals and its completion (a gap over the lease is a lease that lapsed; with
lease/2 the renewal interval, gap - lease/2 is how late the lease keeper was).
Jobs have no timeout, as most jobs have none (`BENCH_JOB_TIMEOUT_MS` gives each
one; every run quoted before decision 0054 gave each a 10-minute timeout, to dodge
the wall-clock sweep that then killed jobs without one 2 x lease x max_stalled
after their claim, renewed or not). A case where not every job completed reports its
statuses instead of steps. Every job's run is replayed and must replay exactly.
`BENCH_LEASE_MS` sets the lease (a short one renews every job several times
while it runs).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parents[1]
LEASE_MS = int(os.environ.get("BENCH_LEASE_MS", "30000"))  # gormes/actors/jobs/batch.py DEFAULT_LEASE_MS
STALL_INTERVAL_MS = 500
STALL_GRACE_MS = 1_000
JOB_TIMEOUT_MS = int(os.environ.get("BENCH_JOB_TIMEOUT_MS", "0")) or None  # none by default (above)


def _env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    return e


def _sql(db: Path, query: str) -> Any:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(query).fetchone()[0]
    finally:
        conn.close()


async def _submit(db: Path, n: int, model: str, turns: int) -> None:
    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.sqlite import SQLiteEventStore

    async with SQLiteEventStore.open(db) as store:
        queue = await JobQueue.open(store)
        async with trio.open_nursery() as nursery:
            for i in range(n):
                data = {"prompt": f"job {i}", "model": model, "tools": ["time.now"], "max_iterations": turns}
                options = {"timeout_ms": JOB_TIMEOUT_MS} if JOB_TIMEOUT_MS else {}
                nursery.start_soon(queue.submit, "agent", data, options)


def _wait_done(db: Path, worker: subprocess.Popen[bytes], timeout: float) -> None:
    """Until no job is unended, asked on one connection as benchmarks/jobs.py's
    driver asks, so that a look costs the same however many jobs ended (decision 0049)."""
    from benchmarks.jobs import GORMES_RUNNING

    deadline = time.monotonic() + timeout
    conn = sqlite3.connect(db, timeout=30)
    try:
        while conn.execute(GORMES_RUNNING).fetchone()[0]:
            if worker.poll() is not None:
                raise SystemExit(f"the worker exited early ({worker.returncode})")
            if time.monotonic() > deadline:
                raise SystemExit("the jobs did not finish in time")
            time.sleep(0.02)
    finally:
        conn.close()


def jobs_case(tmp: Path, n: int, delay_ms: int) -> dict[str, Any]:
    from benchmarks.concurrency import (
        STEPS_PER_RUN, TOOL_TURNS, count_steps, replay_runs, write_script,
    )

    model = write_script(tmp / "script.json", delay_ms)
    db = tmp / "jobs.db"
    trio.run(_submit, db, n, model, TOOL_TURNS + 1)
    started = time.perf_counter()
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(db), str(n), str(LEASE_MS), str(STALL_INTERVAL_MS),
         str(STALL_GRACE_MS), str(tmp / "rss.txt")],
        # in REPO: `python -c` puts its working directory first on sys.path, ahead of
        # PYTHONPATH, and the worker must import this tree's gormes, not the caller's
        env=_env(), cwd=REPO, stderr=open(os.environ.get("BENCH_WORKER_LOG", os.devnull), "w"),
    )
    try:
        _wait_done(db, worker, timeout=600)
        wall = time.perf_counter() - started
        stalled = _sql(db, "SELECT count(*) FROM events WHERE type = 'job.stalled'")  # worker still alive
    finally:
        worker.send_signal(signal.SIGINT)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    completed = _sql(db, "SELECT count(*) FROM jobs WHERE status = 'completed'")
    gaps = _renewal_gaps(db)
    if completed != n:  # the figures of a failed case, to see how it failed
        conn = sqlite3.connect(db)
        statuses = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
        conn.close()
        return {
            "jobs": n, "concurrency": n, "delay_ms": delay_ms, "lease_ms": LEASE_MS,
            "renewals_per_s": renewals_per_s(n, LEASE_MS), "wall_s": round(wall, 2),
            "completed": completed, "statuses": statuses,
            "stalled_while_alive": stalled, "renewal_gap_ms": gaps,
        }
    steps = count_steps(db)
    if steps != n * STEPS_PER_RUN:
        raise SystemExit(f"{steps} steps recorded, expected {n * STEPS_PER_RUN}")
    conn = sqlite3.connect(db)
    try:
        run_ids = sorted(r[0] for r in conn.execute(
            "SELECT json_extract(data, '$.run_id') FROM events WHERE type = 'run.started'"))
    finally:
        conn.close()
    exact = trio.run(replay_runs, db, run_ids)
    usage = (tmp / "rss.txt").read_text().split() if (tmp / "rss.txt").exists() else None
    rss, cpu = (float(usage[0]), float(usage[1])) if usage else (None, None)
    ideal = (TOOL_TURNS + 1) * delay_ms / 1000 if delay_ms else None
    return {
        "jobs": n, "concurrency": n, "delay_ms": delay_ms, "lease_ms": LEASE_MS,
        "renewals_per_s": renewals_per_s(n, LEASE_MS), "steps": steps,
        "steps_per_s": round(steps / wall), "wall_s": round(wall, 2), "ideal_s": ideal,
        "wall_vs_ideal": round(wall / ideal, 3) if ideal else None,
        "worker_rss_mb": None if rss is None else round(rss, 1),
        # the worker's whole life, its start-up included (both threads: the loop and the writer)
        "worker_cpu_s": None if cpu is None else round(cpu, 2),
        "cpu_us_per_step": None if cpu is None else round(cpu / steps * 1e6),
        "completed": completed, "stalled_while_alive": stalled,
        "renewal_gap_ms": gaps,
        "replayed": len(run_ids), "replayed_exactly": exact,
    }


def renewals_per_s(jobs: int, lease_ms: int) -> int:
    """The `job.lease_renewed` events a second that `jobs` jobs in flight need: each
    renewed every lease/2."""
    return round(jobs * 2 * 1000 / lease_ms)


def _renewal_gaps(db: Path) -> dict[str, int]:
    """How long each job's lease went without renewal: the gaps between its claim,
    its renewals and its completion (`at` of each), p50/p99/max over all of them.
    A gap over the lease is a lease that lapsed."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT stream, json_extract(data, '$.at') FROM events WHERE type IN"
            " ('job.claimed', 'job.lease_renewed', 'job.completed') ORDER BY stream, version"
        ).fetchall()
    finally:
        conn.close()
    gaps: list[int] = []
    for (stream, at), (prev_stream, prev_at) in zip(rows[1:], rows):
        if stream == prev_stream:
            gaps.append(at - prev_at)
    gaps.sort()
    if not gaps:
        return {}
    return {"p50": gaps[len(gaps) // 2], "p99": gaps[len(gaps) * 99 // 100], "max": gaps[-1]}


# The worker, as `gormes worker` runs it, writing its peak RSS and CPU as it exits.
_WORKER = """
import atexit, resource, sys
db, n, lease, interval, grace, rss = sys.argv[1:]
def _usage():
    u = resource.getrusage(resource.RUSAGE_SELF)
    open(rss, "w").write(f"{u.ru_maxrss / 1024} {u.ru_utime + u.ru_stime}")
atexit.register(_usage)
from gormes.cli.main import main
sys.argv = ["gormes", "--db", db, "worker", "--concurrency", n, "--lease", lease,
            "--stall-interval", interval, "--stall-grace", grace, "--no-governor"]
try:
    main()
except SystemExit:
    pass
"""


def run_jobs_case(n: int, delay_ms: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "concurrency.py"), "--jobs", str(n), str(delay_ms)],
        check=True, stdout=subprocess.PIPE, text=True, env=os.environ,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def jobs_main(n: int, delay_ms: int) -> None:
    from benchmarks._common import report, scratch_dir
    from gormes.events.catalog import load_all

    load_all()
    with scratch_dir() as tmp:
        report(jobs_case(tmp, n, delay_ms))
