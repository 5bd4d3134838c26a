"""Two `gormes worker` processes share one provider rate limit through the store,
against a local OpenAI-wire server that counts requests per window and answers
429 past its quota (tests/control/rate_server.py):

- with a limit set below the server's, the server never refuses one request and
  never sees more than the limit in any window, though both workers run jobs
  (on SQLite and on PostgreSQL; without the limit, the same load draws 429s);
- a 429 with retry-after told to one worker stops the other one too;
- a provider down for everyone: the outage guard lets one probe at a time
  through, `gormes doctor` fails and `gormes top` reads `outage`; when the
  provider answers again, the jobs complete and the guard closes.

Real processes and real time: the windows are a couple of seconds.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
from cli_helpers import cli_env, gormes_command, run_gormes
from rate_server import RateServer

from gormes.actors.jobs.queue import JobQueue
from gormes.events.sqlite import SQLiteEventStore

pytestmark = pytest.mark.slow

MODEL = "openai:gpt-test"


def submit(db: Path, n: int, first: int = 0) -> list[str]:
    """n agent jobs, prompted `job {first}`, `job {first + 1}`, ..."""
    async def main() -> list[str]:
        async with SQLiteEventStore.open(db) as store:
            queue = await JobQueue.open(store)
            return [(await queue.submit("agent", {"prompt": f"job {first + i}", "model": MODEL})).id
                    for i in range(n)]

    return trio.run(main)


def query(db: Path, sql: str, *params: object) -> list[tuple]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def statuses(db: Path) -> dict[str, int]:
    return dict(query(db, "SELECT status, count(*) FROM jobs GROUP BY status"))


def workers_that_ran_jobs(db: Path) -> set[str]:
    return {w for (w,) in query(db, "SELECT json_extract(data, '$.worker_id') FROM events WHERE type = 'job.claimed'")}


@contextmanager
def two_workers(db: Path | str, server: RateServer, concurrency: int = 4, **env: str) -> Iterator[list[subprocess.Popen]]:
    environment = cli_env() | {"GORMES_OPENAI_BASE_URL": server.base_url, "GORMES_OPENAI_API_KEY": "sk-test"} | env
    workers = [subprocess.Popen(
        gormes_command(db, "worker", "--concurrency", str(concurrency), "--no-governor", "--shutdown-grace", "500"),
        env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    ) for _ in range(2)]
    try:
        yield workers
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            if worker.stderr is not None:
                worker.stderr.close()


def wait_for(condition, workers: list[subprocess.Popen], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for worker in workers:
            assert worker.poll() is None, f"a worker exited: {worker.stderr.read() if worker.stderr else ''}"
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_two_workers_never_pass_a_shared_limit_set_below_the_servers(tmp_path: Path) -> None:
    db = tmp_path / "limits.db"
    jobs = submit(db, 12)
    with RateServer(limit=4, window_s=2.0) as server, \
            two_workers(db, server, GORMES_RATE_LIMITS="openai:gpt-test=3req/2s") as workers:
        wait_for(lambda: statuses(db).get("completed") == len(jobs), workers, 120, f"jobs: {statuses(db)}")
    assert server.refused == 0, server.refusals
    assert len(server.arrivals) == 12
    assert server.most_in_window() == 3  # the limit, reached and never passed
    assert server.arrivals[-1] - server.arrivals[0] >= 2.0 * (12 / 3 - 1) - 0.1
    assert len(workers_that_ran_jobs(db)) == 2  # both workers sent requests


def test_on_postgres_two_workers_never_pass_the_shared_limit(tmp_path: Path) -> None:
    from pg_helpers import PG_URL, admin, fresh_schema, url_for_schema

    from gormes.events.postgres import PostgresEventStore

    with fresh_schema() as schema:
        async def main() -> list[str]:
            async with PostgresEventStore.open(PG_URL, schema=schema) as store:
                queue = await JobQueue.open(store)
                return [(await queue.submit("agent", {"prompt": f"job {i}", "model": MODEL})).id for i in range(9)]

        jobs = trio.run(main)

        def completed() -> bool:
            rows = admin(f'SELECT count(*) FROM "{schema}".jobs WHERE status = %s', ("completed",))
            return rows[0][0] == len(jobs)

        with RateServer(limit=4, window_s=2.0) as server, \
                two_workers(url_for_schema(schema), server, GORMES_RATE_LIMITS="openai:gpt-test=3req/2s") as workers:
            wait_for(completed, workers, 120, "the jobs did not complete")
        claimed = admin(f"""SELECT count(DISTINCT data::json->>'worker_id') FROM "{schema}".events"""
                        " WHERE type = 'job.claimed'")
    assert server.refused == 0, server.refusals
    assert len(server.arrivals) == 9 and server.most_in_window() == 3
    assert claimed[0][0] == 2


def test_without_a_shared_limit_the_same_two_workers_pass_the_servers_quota(tmp_path: Path) -> None:
    """The comparator: the same load, no rate limit configured."""
    db = tmp_path / "unlimited.db"
    jobs = submit(db, 12)
    with RateServer(limit=4, window_s=2.0, retry_after_s=0.5) as server, \
            two_workers(db, server, GORMES_MODEL_RETRIES="20") as workers:
        wait_for(lambda: statuses(db).get("completed") == len(jobs), workers, 120, f"jobs: {statuses(db)}")
    assert server.refused > 0


def test_a_429_with_retry_after_stops_the_other_worker_too(tmp_path: Path) -> None:
    """Stated by cause, not by a timing allowance. Each worker runs one job at a
    time. The first job's request is answered 429 with a retry-after; the second
    job is submitted only once the back-off is in the store, so its turn is
    admitted after the back-off was known, and the worker told of the 429 is
    still busy with the first job (its run waits out the retry-after): the other
    worker takes the second job, and its request must wait out the back-off it
    was never told of."""
    db = tmp_path / "backoff.db"
    retry_after = 6.0
    (told_job,) = submit(db, 1)
    with RateServer(refuse_first=1, retry_after_s=retry_after, hold_s=0.3) as server, \
            two_workers(db, server, concurrency=1) as workers:
        wait_for(lambda: blocked_until(db) is not None, workers, 60, "no worker recorded the back-off")
        (other_job,) = submit(db, 1, first=1)
        wait_for(lambda: statuses(db).get("completed") == 2, workers, 120, f"jobs: {statuses(db)}")
    assert server.rejections == []
    (refused_at,) = server.refusals
    (told, _), (other, claimed_at) = claim_of(db, told_job), claim_of(db, other_job)
    assert told != other
    (arrived,) = [t for t, r in zip(server.arrivals, server.requests, strict=True) if "job 1" in json.dumps(r.body)]
    # The back-off runs from when the told worker heard the 429, at least hold_s
    # after the server refused; that slack covers the workers' clocks, wall time
    # read once and moved by trio's monotonic clock (TrioWallClock).
    assert arrived >= refused_at + retry_after, (refused_at, arrived)
    until = blocked_until(db)
    assert until is not None and claimed_at < until  # the other worker came for its turn while it held
    (reason,) = query(db, "SELECT blocked_reason FROM provider_limits WHERE key = ?", MODEL)[0]
    assert "HTTP 429" in reason


def blocked_until(db: Path) -> float | None:
    try:
        rows = query(db, "SELECT blocked_until FROM provider_limits WHERE key = ?", MODEL)
    except sqlite3.OperationalError:  # no table yet
        return None
    return rows[0][0] if rows else None


def claim_of(db: Path, job_id: str) -> tuple[str, float]:
    """The worker that claimed the job, and when (seconds since the epoch)."""
    ((worker, at_ms),) = query(db, "SELECT json_extract(data, '$.worker_id'), json_extract(data, '$.at') FROM events"
                                   " WHERE type = 'job.claimed' AND stream = ?", f"job-{job_id}")
    return worker, at_ms / 1000


def test_an_outage_lets_one_probe_at_a_time_and_doctor_and_top_say_so(tmp_path: Path) -> None:
    db = tmp_path / "outage.db"
    jobs = submit(db, 6)

    def guard_open() -> bool:
        try:
            rows = query(db, "SELECT open_since FROM provider_limits WHERE key = ?", MODEL)
        except sqlite3.OperationalError:  # no table yet
            return False
        return bool(rows) and rows[0][0] is not None

    with RateServer(outage=True, hold_s=0.3) as server, \
            two_workers(db, server, GORMES_OUTAGE_AFTER="3", GORMES_MODEL_RETRIES="50") as workers:
        wait_for(guard_open, workers, 60, "the guard never opened")
        time.sleep(1.0)  # what was on its way when it opened has been answered
        server.reset_counts()
        time.sleep(4.0)
        assert len(server.failures) >= 2  # probes went on, one after another
        assert server.most_in_flight == 1

        doctor = run_gormes(db, "doctor", "--json", "--offline")
        (outage,) = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "providers.outage"]
        assert doctor.returncode == 1 and outage["status"] == "fail", outage
        assert MODEL in outage["message"] and "HTTP 503" in outage["message"]
        top = run_gormes(db, "top", "--once")
        assert top.returncode == 0, top.stderr
        (line,) = [li for li in top.stdout.splitlines() if MODEL in li and "outage" in li]
        assert "halted" in line
        top_json = json.loads(run_gormes(db, "top", "--once", "--json").stdout)
        assert top_json["providers"][0]["state"] == "outage"

        server.outage = False  # the provider answers again: the next probe closes the guard
        wait_for(lambda: statuses(db).get("completed") == len(jobs), workers, 120, f"jobs: {statuses(db)}")
    assert not guard_open()
    doctor = run_gormes(db, "doctor", "--json", "--offline")
    (outage,) = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "providers.outage"]
    assert outage["status"] == "ok", outage
