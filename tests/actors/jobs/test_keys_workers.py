"""Per-key concurrency across two worker processes (decision 0032), on a real SQLite
file and on PostgreSQL.

Two `gormes worker` processes (three slots each, one queue each) drain jobs of key
A (limit 2), key B (limit 1) and jobs without a key, each key's jobs in both queues. Every handler appends `start`/`end` lines
to one file (O_APPEND: whole lines, in the order they happened, from both
processes); replaying the file, no key ever has more jobs running than its limit.
Two handlers wait for something only a correct queue lets happen, so the test
shows the limits are reached and not just unreached: the first A job runs until an
A job has started in the other process (two A jobs at once, one per process: only
the other worker claims from the other queue), the
first B job until a job without a key has started (other work runs while B is
full). At the end every job completed once and the ledger equals its rebuild.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from pg_helpers import backend_store, url_for_schema

from gormes.actors.jobs.queue import JobQueue

REPO = Path(__file__).resolve().parents[3]
LIMITS = {"A": 2, "B": 1}

HANDLERS = """
import os
import time
import trio
import gormes

LOG = os.environ["GORMES_KEYS_LOG"]


def note(line):
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


def seen(test, after):
    # whether a line after the line `after` passes `test`
    with open(LOG) as f:
        lines = [line.split() for line in f]
    return any(test(w) for w in lines[lines.index(after) + 1:])


@gormes.job("keyed")
async def keyed(ctx, data):
    key, me = data["key"], str(os.getpid())
    started = f"start {key} {ctx.id} {me}"
    note(started)
    wait = data.get("wait")
    # what it waits for must start after it did: one that started before may have ended
    if wait == "other-process":  # until a job of my key started in the other worker
        test = lambda w: w[0] == "start" and w[1] == key and w[3] != me
    elif wait == "no-key":  # until a job without a key started
        test = lambda w: w[0] == "start" and w[1] == "-"
    else:
        test = None
    if test is not None:
        deadline = time.monotonic() + 60
        while not seen(test, started.split()):
            if time.monotonic() > deadline:
                note(f"gave-up {key} {ctx.id} {me}")
                break
            await trio.sleep(0.02)
    await trio.sleep(data.get("sleep", 0.03))
    note(f"end {key} {ctx.id} {me}")
    return key
"""


@pytest.fixture(params=["sqlite", "postgres"])
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Any, str]]:
    """(store, what `gormes --db` takes for it)."""
    async with backend_store(request.param, tmp_path / "keys.db") as store:
        yield store, str(tmp_path / "keys.db") if request.param == "sqlite" else url_for_schema(store.schema)


def env_with(log: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("GORMES_DB", None)
    env["GORMES_KEYS_LOG"] = str(log)
    return env


def gormes(db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "gormes", "--db", db, *args]


def _live_workers(conn: Any) -> int:
    try:
        return conn.execute("SELECT count(*) FROM worker_heartbeats WHERE stopped_at IS NULL").fetchone()[0]
    except Exception:  # the table is made by the first worker
        return 0


def replay(lines: list[list[str]]) -> tuple[dict[str, int], Counter[str]]:
    """The most jobs of each key running at once, and how often each job started."""
    running: Counter[str] = Counter()
    most: dict[str, int] = {}
    starts: Counter[str] = Counter()
    for what, key, job_id, _pid in lines:
        if what == "start":
            running[key] += 1
            starts[job_id] += 1
            most[key] = max(most.get(key, 0), running[key])
        elif what == "end":
            running[key] -= 1
    return most, starts


async def test_two_workers_never_run_more_jobs_of_a_key_than_its_limit(target, tmp_path):
    store, db = target
    log = tmp_path / "runs.log"
    log.touch()
    handlers = tmp_path / "key_handlers.py"
    handlers.write_text(HANDLERS)
    queue = await JobQueue.open(store)

    # Worker i claims from queue q<i> only, and each key has jobs in both queues:
    # the key's limit is all that holds them together.
    workers = [
        subprocess.Popen(
            gormes(db, "worker", "--import", str(handlers), "--queue", f"q{i}", "--concurrency", "3",
                   "--no-governor", "--lease", "10000", "--stall-interval", "1000",
                   "--stall-grace", "10000"),
            env=env_with(log), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        for i in range(2)
    ]
    try:
        with trio.fail_after(180):  # a liveness guard, not a measurement
            # both workers are up before the first job is submitted
            while await store.read_sql(_live_workers) < 2:
                assert all(w.poll() is None for w in workers), [w.stderr.read() for w in workers]
                await trio.sleep(0.1)

            async def submit(queue_name: str, key: str | None, **data: Any) -> str:
                options: dict[str, Any] = {"queue": queue_name}
                if key is not None:
                    options |= {"concurrency_key": key, "concurrency_limit": LIMITS[key]}
                return (await queue.submit("keyed", {"key": key or "-", **data}, options)).id

            # First in line: in q0 an A job that runs until an A job has started in
            # the other worker (only q1's worker can start one), in q1 a B job that
            # runs until a job without a key has started; then a mix in both queues.
            await submit("q0", "A", wait="other-process")
            waiting_b = await submit("q1", "B", wait="no-key")
            # The mix only once the waiting B runs: else q0's worker could start a B of
            # the mix first, hold B's limit of 1 until every job without a key had
            # started, and leave the waiting B nothing to wait for (CI, once).
            while not [w for w in log.read_text().splitlines() if w.split()[:3] == ["start", "B", waiting_b]]:
                assert all(w.poll() is None for w in workers), [w.stderr.read() for w in workers]
                await trio.sleep(0.05)
            for i in range(24):
                await submit(f"q{i % 2}", ("A", "B", None)[i % 3], sleep=0.02 + 0.01 * (i % 4))
            total = 26

            while (await queue.stats()).by_status.get("completed", 0) < total:
                assert all(w.poll() is None for w in workers), [w.stderr.read() for w in workers]
                await trio.sleep(0.1)
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        errors = [w.communicate(timeout=60)[1] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], errors

    lines = [line.split() for line in log.read_text().splitlines()]
    assert not [w for w in lines if w[0] == "gave-up"], lines
    most, starts = replay(lines)
    assert most["A"] == LIMITS["A"] and most["B"] == LIMITS["B"]  # reached, never passed
    assert len(starts) == total and set(starts.values()) == {1}  # each job ran once
    pids_of_a = {pid for what, key, _, pid in lines if what == "start" and key == "A"}
    assert len(pids_of_a) == 2  # A's jobs ran in both processes, two at once at most
    # the waiting B job ran while a job without a key started
    b_start = next(i for i, w in enumerate(lines) if w[0] == "start" and w[2] == waiting_b)
    b_end = next(i for i, w in enumerate(lines) if w[0] == "end" and w[2] == waiting_b)
    assert any(w[:2] == ["start", "-"] for w in lines[b_start:b_end]), lines

    check = subprocess.run(gormes(db, "projections", "rebuild", "--check"), env=env_with(log),
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
