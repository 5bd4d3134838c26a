"""`gormes worker` is handed the agent jobs' bridge (gormes/actors/agent_jobs/install.py):
the `agent` handler, and the sweep that ends the runs of an agent job that ended
while no attempt was running it."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
from pathlib import Path

import trio
from cli_helpers import cli_env, gormes_command, run_gormes

from gormes.actors.jobs.context import JobContext
from gormes.actors.jobs.queue import JobQueue
from gormes.events.runs import RunStarted, run_stream
from gormes.events.sqlite import SQLiteEventStore


def cancel_an_agent_job_whose_run_was_cut_off(db: Path, run_id: str) -> None:
    """An agent job whose attempt started `run_id`, then its worker was lost; the
    job is cancelled while no attempt runs it, so no next attempt ends the run."""

    async def main() -> None:
        async with SQLiteEventStore.open(db) as store:
            queue = await JobQueue.open(store)
            job = await queue.submit("agent", {"prompt": "p"})
            claimed = await queue.claim({"agent"}, worker_id="lost", lease_ms=1000)
            assert claimed is not None
            await JobContext(queue, claimed).log(f"run {run_id}", data={"agent_run": run_id})
            await store.append(run_stream(run_id), [RunStarted(
                run_id=run_id, handler="agent", handler_version="v", depth=0)], expected_version=0)
            await queue.cancel(job.id)

    trio.run(main)


def last_type(db: Path, stream: str) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT type FROM events WHERE stream = ? ORDER BY version DESC LIMIT 1",
                            (stream,)).fetchone()[0]
    finally:
        conn.close()


def test_gormes_worker_runs_agent_jobs_and_sweeps_their_cut_off_runs(tmp_path: Path) -> None:
    db = tmp_path / "wired.db"
    cancel_an_agent_job_whose_run_was_cut_off(db, "r-lost")
    worker = subprocess.Popen(
        gormes_command(db, "worker", "--lease", "100", "--stall-interval", "20", "--no-governor"),
        env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        # The sweep waits out a lease and the abort grace (5 s) after the job ended.
        for _ in range(300):
            if last_type(db, run_stream("r-lost")) == "run.cancelled":
                break
            run_gormes(db, "jobs", "stats")  # a pause that is a real process, not a sleep
        assert last_type(db, run_stream("r-lost")) == "run.cancelled"
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=60)
    assert "handlers agent, echo, sleep;" in stderr, stderr
