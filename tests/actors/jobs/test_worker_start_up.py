"""A worker that imports plain job handlers loads none of what only agent jobs and
operations need before its first job (the built-in tools with their sqlite-utils
and yaml; the runs' cut-off machinery, loaded by the first sweep): a real `gormes
worker` under `python -X importtime` drains a job, and the modules it imported are
read from its stderr. No time is asserted."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import trio

from gormes.actors.jobs.queue import JobQueue
from gormes.events.sqlite import SQLiteEventStore

REPO = Path(__file__).resolve().parents[3]
HANDLERS = """
import gormes

@gormes.job("noop")
async def noop(ctx, data):
    return None
"""
NOT_BEFORE_THE_FIRST_JOB = (
    "gormes.tools.builtin", "sqlite_utils", "yaml", "gormes.knowledge",
    "gormes.actors.agent_jobs.cut_off", "gormes.actors.runs.cut_off",
)


def _completed(db: Path) -> int:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute("SELECT count(*) FROM jobs WHERE status = 'completed'").fetchone()[0]
    finally:
        conn.close()


def test_a_worker_of_plain_handlers_drains_without_the_built_in_tools(tmp_path: Path) -> None:
    db = tmp_path / "gormes.db"
    handlers = tmp_path / "handlers.py"
    handlers.write_text(HANDLERS)

    async def submit() -> None:
        async with SQLiteEventStore.open(db) as store:
            await (await JobQueue.open(store)).submit("noop", None)

    trio.run(submit)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # (the agent jobs' sweeps run every stall interval: none runs in this test)
    worker = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "gormes", "--db", str(db), "worker",
         "--import", str(handlers), "--no-governor", "--stall-interval", "600000"],
        env=env, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while _completed(db) < 1 and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _completed(db) == 1
    finally:
        worker.send_signal(signal.SIGINT)
        _, stderr = worker.communicate(timeout=60)
    imported = [line.split("|")[-1].strip() for line in stderr.splitlines()
                if line.startswith("import time:")]
    assert "gormes.actors.jobs.worker" in imported
    loaded = [m for m in imported if m.startswith(NOT_BEFORE_THE_FIRST_JOB)]
    assert loaded == []
