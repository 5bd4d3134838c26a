"""Crash: three worker processes drain 300 jobs while workers are SIGKILLed at random
and restarted. At the end every job is completed exactly once, none is lost and
no job used more attempts than it may.

Handlers append `job id, lock token` to a side file opened O_APPEND when they
finish (before the worker records the completion), so a kill between the two
shows up as a line whose token never completed, and a duplicate completion would
show up as two completion events in the log.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from cli_helpers import cli_env, gormes_command, run_gormes, side_file_handlers

pytestmark = pytest.mark.slow

N_JOBS = 300
N_WORKERS = 3

HANDLERS = side_file_handlers("crashy", "GORMES_CRASH_SIDE_FILE", (0.05, 0.15))


def start_worker(db: Path, handlers: Path, side: Path) -> subprocess.Popen:
    env = cli_env()
    env["GORMES_CRASH_SIDE_FILE"] = str(side)
    return subprocess.Popen(
        gormes_command(db, "worker", "--import", str(handlers), "--concurrency", "4",
                       "--lease", "1000", "--stall-interval", "200", "--stall-grace", "500",
                       "--no-governor"),
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def status_counts(db: Path) -> Counter[str]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return Counter(dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status")))
    finally:
        conn.close()


def test_workers_killed_at_random_drain_every_job_exactly_once(tmp_path: Path):
    db, side = tmp_path / "jobs.db", tmp_path / "completions.txt"
    handlers = tmp_path / "crash_handlers.py"
    handlers.write_text(HANDLERS)
    for n in range(N_JOBS):  # one transaction each, like real clients
        done = run_gormes(db, "jobs", "submit", "crashy", "--data", f'{{"n": {n}}}',
                          "--max-stalled", "100") if n < 3 else None
        if done is not None:
            assert done.returncode == 0, done.stderr
    _submit_rest(db, N_JOBS - 3)

    rng = random.Random(20261130)
    workers = [start_worker(db, handlers, side) for _ in range(N_WORKERS)]
    kills = 0
    deadline = time.monotonic() + 100
    try:
        while status_counts(db)["completed"] < N_JOBS:
            assert time.monotonic() < deadline, f"not drained: {status_counts(db)}"
            time.sleep(rng.uniform(0.2, 0.6))
            if kills < 12:
                victim = rng.randrange(N_WORKERS)
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].wait()
                kills += 1
                workers[victim] = start_worker(db, handlers, side)
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    conn = sqlite3.connect(db)
    jobs = conn.execute(
        "SELECT id, status, attempts_made, max_attempts FROM jobs"
    ).fetchall()
    stalls = conn.execute("SELECT count(*) FROM events WHERE type = 'job.stalled'").fetchone()[0]
    completions = Counter(
        stream.removeprefix("job-") for (stream,) in
        conn.execute("SELECT stream FROM events WHERE type = 'job.completed'")
    )
    # The token each job was completed under: its last claim before the completion.
    last_claim_token = dict(conn.execute(
        "SELECT substr(stream, 5), json_extract(data, '$.lock_token') FROM events "
        "WHERE type = 'job.claimed' ORDER BY position"
    ).fetchall())
    conn.close()
    recorded = {tuple(line.split()) for line in side.read_text().splitlines()}

    assert kills >= 3 and stalls >= 1  # kills did catch jobs in flight
    assert len(jobs) == N_JOBS  # none lost
    assert all(status == "completed" for _, status, _, _ in jobs)
    assert all(made <= most for _, _, made, most in jobs)  # attempts never over max
    assert set(completions) == {job_id for job_id, *_ in jobs}
    assert max(completions.values()) == 1  # none completed twice
    # Every completion in the ledger was produced by a handler run under that lock.
    assert all((job_id, last_claim_token[job_id]) in recorded for job_id in completions)


def _submit_rest(db: Path, n: int) -> None:
    """Submit the remaining jobs from one process (300 CLI calls would take a minute)."""
    import trio

    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.sqlite import SQLiteEventStore

    async def main() -> None:
        async with SQLiteEventStore.open(db) as store:
            queue = await JobQueue.open(store)
            for n_ in range(3, 3 + n):
                await queue.submit("crashy", {"n": n_}, {"max_stalled": 100})

    trio.run(main)
