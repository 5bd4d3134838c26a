"""Drain on PostgreSQL: three `gormes --db URL worker` processes against one
database (a fresh schema) drain 1,000 jobs while one worker is SIGKILLed mid-run
(and not restarted) and the PostgreSQL server is restarted once.

What "exactly once" means here, and what is asserted:

- In the ledger and the log, every job is completed exactly once: 1,000 rows, all
  `completed` (none dead, failed or waiting), and exactly one `job.completed`
  event per job.
- A handler may run more than once for one job, but never twice under one claim:
  the killed worker's jobs and any job whose lease ran out while the server was
  down are claimed again by another worker, and the first attempt may have run
  its handler already. So each handler appends `job id, lock token` to a side
  file opened O_APPEND when it finishes (before the worker records the
  completion), and the test asserts that no (id, token) line appears twice, that
  a job claimed only once ran its handler at most once, and that the completion
  in the ledger was produced by a handler run under the job's last claim (the
  one that completed it): a stale claimant's completion is fenced off.
- The two workers that were not killed survive the restart: they are still
  running at the end, and they completed the jobs left after it.
- Attempts never exceed max_attempts; the kill caught jobs in flight (at least
  one `job.stalled`, and jobs claimed by the killed worker were completed under
  another worker's claim).

Leases are short (2 s, renewed every 1 s; stalled after 0.5 s more, swept every
0.3 s) so the killed worker's jobs come back quickly. Skipped only when the
server is unreachable or cannot be restarted here (needs root and pg_ctlcluster);
the server is started again in a `finally`, also when the test fails.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from pg_helpers import fresh_schema, require_postgres, url_for_schema

from cli_helpers import cli_env, gormes_command, run_gormes, side_file_handlers

pytestmark = pytest.mark.slow

N_JOBS = 1000
N_WORKERS = 3
KILL_AT = 200  # completed jobs when worker 0 is SIGKILLed
RESTART_AT = 450  # completed jobs when the server is restarted

HANDLERS = side_file_handlers("drain", "GORMES_DRAIN_SIDE_FILE", (0.01, 0.05))


def pg_cluster() -> tuple[str, str] | None:
    """(version, name) of the local cluster when pg_ctlcluster can restart it."""
    if shutil.which("pg_ctlcluster") is None or os.geteuid() != 0:
        return None
    versions = sorted(p.name for p in Path("/etc/postgresql").glob("*") if (p / "main").is_dir())
    return (versions[-1], "main") if versions else None


def pg_ctl(cluster: tuple[str, str], action: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, action],
        capture_output=True, text=True, timeout=120,
    )


def ensure_running(cluster: tuple[str, str]) -> None:
    if pg_ctl(cluster, "status").returncode != 0:
        pg_ctl(cluster, "start")


def start_worker(url: str, handlers: Path, side: Path, stderr: Path) -> subprocess.Popen:
    env = cli_env()
    env["GORMES_DRAIN_SIDE_FILE"] = str(side)
    with stderr.open("ab") as err:  # a file, not a pipe: a full pipe would block the worker
        return subprocess.Popen(
            gormes_command(url, "worker", "--import", str(handlers), "--concurrency", "8",
                           "--lease", "2000", "--stall-interval", "300",
                           "--stall-grace", "500", "--no-governor"),
            env=env, stdout=subprocess.DEVNULL, stderr=err,
        )


def status_counts(url: str) -> Counter[str]:
    """The ledger's statuses; empty while the server is down or restarting."""
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            return Counter(dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status")))
    except psycopg.OperationalError:
        return Counter()


def test_three_workers_drain_1000_jobs_through_a_kill_and_a_server_restart(tmp_path: Path):
    require_postgres()
    cluster = pg_cluster()
    if cluster is None:
        pytest.skip("restarting the server needs root and pg_ctlcluster")
    try:
        with fresh_schema() as schema:
            drain(url_for_schema(schema), cluster, tmp_path)
    finally:
        ensure_running(cluster)


def drain(url: str, cluster: tuple[str, str], tmp_path: Path) -> None:
    side, handlers = tmp_path / "completions.txt", tmp_path / "drain_handlers.py"
    handlers.write_text(HANDLERS)
    first = run_gormes(url, "jobs", "submit", "drain", "--data", '{"n": 0}', "--max-stalled", "100")
    assert first.returncode == 0, first.stderr  # the CLI submits on Postgres too
    _submit_rest(url, N_JOBS - 1)
    assert sum(status_counts(url).values()) == N_JOBS

    rng = random.Random(20261130)
    errs = [tmp_path / f"worker{i}.err" for i in range(N_WORKERS)]
    workers = [start_worker(url, handlers, side, errs[i]) for i in range(N_WORKERS)]
    killed = restarted = False
    deadline = time.monotonic() + 240  # a guard against hanging, not a timing assertion
    try:
        while (counts := status_counts(url))["completed"] < N_JOBS:
            assert time.monotonic() < deadline, f"not drained: {counts}"
            for i, proc in enumerate(workers):
                if not (killed and i == 0):
                    assert proc.poll() is None, f"worker {i} exited: {errs[i].read_text()}"
            if not killed and counts["completed"] >= KILL_AT:
                assert counts["active"] >= 1, counts
                killed_pid = workers[0].pid
                workers[0].send_signal(signal.SIGKILL)
                workers[0].wait()
                killed = True
            if killed and not restarted and counts["completed"] >= RESTART_AT:
                done = pg_ctl(cluster, "restart")
                assert done.returncode == 0, done.stderr
                restarted = True
                completed_at_restart = counts["completed"]
            time.sleep(rng.uniform(0.02, 0.08))
        survivors_alive = [proc.poll() is None for proc in workers[1:]]
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
        ensure_running(cluster)

    assert killed and restarted
    assert completed_at_restart < N_JOBS  # the restart came while jobs were left
    assert survivors_alive == [True, True]  # the restart did not take a worker down

    with psycopg.connect(url) as conn:
        jobs = conn.execute("SELECT id, status, attempts_made, max_attempts FROM jobs").fetchall()
        stalls = conn.execute("SELECT count(*) FROM events WHERE type = 'job.stalled'").fetchone()[0]
        completions = Counter(
            stream.removeprefix("job-") for (stream,) in
            conn.execute("SELECT stream FROM events WHERE type = 'job.completed'")
        )
        claimed = conn.execute(
            "SELECT substr(stream, 5), data::jsonb ->> 'lock_token', data::jsonb ->> 'worker_id'"
            " FROM events WHERE type = 'job.claimed' ORDER BY position"
        ).fetchall()
    claims = [(job_id, token) for job_id, token, _ in claimed]
    last_claim_token = dict(claims)  # the token each job was last claimed (and completed) under
    last_claimant = {job_id: worker for job_id, _, worker in claimed}
    # Jobs the killed worker held that another worker finished ("-PID-" is in its id).
    taken_over = {job_id for job_id, _, worker in claimed
                  if f"-{killed_pid}-" in worker and f"-{killed_pid}-" not in last_claimant[job_id]}
    claims_per_job = Counter(job_id for job_id, _ in claims)
    lines = [tuple(line.split()) for line in side.read_text().splitlines()]
    runs_per_job = Counter(job_id for job_id, _ in lines)

    assert len(jobs) == N_JOBS  # none lost
    assert Counter(status for _, status, _, _ in jobs) == {"completed": N_JOBS}
    assert all(made <= most for _, _, made, most in jobs)  # attempts never over max
    assert set(completions) == {job_id for job_id, *_ in jobs}
    assert max(completions.values()) == 1  # none completed twice
    assert stalls >= 1 and taken_over  # the kill caught jobs in flight; others finished them
    assert len(lines) == len(set(lines))  # a handler never ran twice under one claim
    assert set(lines) <= set(claims)  # ... and only under a claim recorded in the log
    assert all(runs_per_job[j] <= 1 for j, n in claims_per_job.items() if n == 1)
    # Every completion in the ledger was produced by a handler run under that claim.
    assert all((job_id, last_claim_token[job_id]) in set(lines) for job_id in completions)


def _submit_rest(url: str, n: int) -> None:
    """Submit the remaining jobs from one process (1,000 CLI calls would take minutes)."""
    import trio

    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.open import open_store

    async def main() -> None:
        async with open_store(url) as store:
            queue = await JobQueue.open(store)
            for n_ in range(1, 1 + n):
                await queue.submit("drain", {"n": n_}, {"max_stalled": 100})

    trio.run(main)
