"""benchmarks/jobs.py's driver watches for the end of a drain with queries whose
cost does not grow with the jobs done (decision 0049): gormes' reads the first
entry of the partial index of unended jobs, huey's the last rowid of its results.
No timing is asserted; this checks what the queries answer and how SQLite runs
them, and that a drain watched this way ends with every job done."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest


def test_the_gormes_watch_reads_the_unended_index_and_refuses_a_job_ended_otherwise(bench, tmp_path: Path) -> None:
    db = tmp_path / "gormes.db"
    bench.submit_gormes(db, 3)
    conn = sqlite3.connect(db)
    try:
        plan = " ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + bench.GORMES_RUNNING))
        assert "jobs_unended" in plan, plan
        assert conn.execute(bench.GORMES_RUNNING).fetchone()[0] == 1
        # Every job ended, one of them not completed: the drain failed, it is not slow.
        conn.execute("UPDATE jobs SET status = 'completed'")
        conn.execute("UPDATE jobs SET status = 'failed' WHERE rowid = 1")
        conn.commit()
        assert conn.execute(bench.GORMES_RUNNING).fetchone()[0] == 0
    finally:
        conn.close()
    with pytest.raises(RuntimeError, match="2 of 3 jobs completed"):
        bench.all_completed(db, 3)


def test_a_huey_drain_watched_by_its_last_rowid_ends_with_every_result(bench, tmp_path: Path) -> None:
    drain = bench.huey_throughput(tmp_path, 20)
    assert drain.jobs_per_s > 0 and drain.cpu_s > 0 and drain.observer_cpu_s >= 0
    conn = sqlite3.connect(tmp_path / "huey.db")
    try:
        plan = " ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + bench.HUEY_RUNNING, (20,)))
        assert plan == "SEARCH kv", plan  # max(rowid): one step down the table's b-tree, no scan
        assert conn.execute("SELECT count(*) FROM kv").fetchone()[0] == 20
        assert conn.execute(bench.HUEY_RUNNING, (20,)).fetchone()[0] == 0
    finally:
        conn.close()
