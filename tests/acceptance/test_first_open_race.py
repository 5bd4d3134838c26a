"""Several processes opening one brand-new database at once all succeed.

(Regression: the file check read application_id and the table count in two
snapshots, and the ledger's schema setup met "database is locked" from a stale
WAL snapshot.)
"""

from __future__ import annotations

import subprocess
import sys

SUBMIT = """
import sys, trio
from gormes.events.catalog import load_all
from gormes.events.sqlite import SQLiteEventStore
from gormes.actors.jobs.queue import JobQueue
from gormes.events.jobs import JobOptions

async def main():
    async with SQLiteEventStore.open(sys.argv[1]) as store:
        queue = await JobQueue.open(store)
        await queue.submit("echo", {"n": int(sys.argv[2])}, JobOptions())

load_all()
trio.run(main)
"""


def test_processes_racing_to_create_one_database_all_succeed(tmp_path):
    for round_ in range(4):
        db = tmp_path / f"race-{round_}" / "gormes.db"
        procs = [
            subprocess.Popen([sys.executable, "-c", SUBMIT, str(db), str(i)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(6)
        ]
        results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        for p in procs:
            p.stdout.close()
            p.stderr.close()
        assert [code for code, _ in results] == [0] * 6, [err for _, err in results if err]
        listed = subprocess.run(
            [sys.executable, "-m", "gormes", "--db", str(db), "jobs", "list", "--json"],
            capture_output=True, text=True, timeout=60,
        )
        assert listed.returncode == 0, listed.stderr
        assert sorted(j["data"]["n"] for j in __import__("json").loads(listed.stdout)) == list(range(6))
