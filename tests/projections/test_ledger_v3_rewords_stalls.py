"""Ledger version 3: a job dead of stalls says "max stalled count reached" (the
count is reached when the job dies: --max-stalled 1 ends it at its first stall).
A ledger version 2 built says "exceeded"; opening it rewords those rows in place,
so it stays identical to its rebuild (`gormes projections rebuild --check`)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from gormes.actors.jobs.queue import JobQueue
from gormes.events.job_machine import STALLED_ERROR, STALLED_ERROR_BEFORE
from gormes.events.sqlite import SQLiteEventStore
from gormes.projections import ledger


class Clock:
    t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


async def test_a_version_2_ledger_is_reworded_and_equals_its_rebuild(tmp_path):
    db = tmp_path / "gormes.db"
    clock = Clock()
    async with SQLiteEventStore.open(db) as store:
        queue = await JobQueue.open(store, clock=clock)
        job = await queue.submit("a", options={"max_stalled": 1})
        await queue.claim({"a"}, lease_ms=100)
        clock.t += 1
        assert await queue.sweep_stalled(grace_ms=50) == [job.id]
        assert (await queue.get(job.id)).error == STALLED_ERROR == "max stalled count reached"
    # what a version-2 ledger held
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE jobs SET error = ? WHERE id = ?", (STALLED_ERROR_BEFORE, job.id))
        conn.execute("UPDATE projection_versions SET version = 2 WHERE projection = ?", (ledger.NAME,))

    async with SQLiteEventStore.open(db) as store:
        queue = await JobQueue.open(store, clock=clock)
        assert (await queue.get(job.id)).error == STALLED_ERROR
    with sqlite3.connect(db) as conn:
        (version,) = conn.execute("SELECT version FROM projection_versions WHERE projection = ?",
                                  (ledger.NAME,)).fetchone()
    assert version == ledger.VERSION >= 3  # 4 since: decision 0032's columns
    check = subprocess.run([sys.executable, "-m", "gormes", "--db", str(db), "projections", "rebuild", "--check"],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
