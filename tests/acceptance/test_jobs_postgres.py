"""`gormes --db postgresql://... jobs` and `... worker` on the real PostgreSQL server.

Jobs are submitted through the CLI (a fresh schema per test), two worker
processes drain them, and in the middle every connection the workers hold is
killed by the server (`pg_terminate_backend`): their stores reconnect with
backoff and the workers go on. At the end every job is completed exactly once
(one `job.completed` event each), no handler ran twice under one claim, both
workers are still alive, and their heartbeat rows say so.

Bad targets stay one line on stderr and a non-zero exit. Skipped, with the
reason, only when the server cannot be reached.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pg_helpers import PG_URL, admin, fresh_schema, url_for_schema

from cli_helpers import (
    assert_one_line_error, cli_env, gormes_command, run_gormes, side_file_handlers,
)

N_JOBS = 120

HANDLERS = side_file_handlers("pgwork", "GORMES_SIDE_FILE", (0.01, 0.05))


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        yield name


def query(schema: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url_for_schema(schema), autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def start_worker(url: str, handlers: Path, side: Path) -> subprocess.Popen:
    env = cli_env()
    env["GORMES_SIDE_FILE"] = str(side)
    return subprocess.Popen(
        gormes_command(url, "worker", "--import", str(handlers), "--concurrency", "4",
                       "--lease", "2000", "--stall-interval", "300", "--stall-grace", "500",
                       "--no-governor"),
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )


def completed(schema: str) -> int:
    return query(schema, "SELECT count(*) FROM jobs WHERE status = 'completed'")[0][0]


def test_cli_submit_then_two_workers_drain_every_job_once_through_lost_connections(
    schema: str, tmp_path: Path
):
    app = f"gormes-test-{secrets.token_hex(4)}"
    url = f"{url_for_schema(schema)}&application_name={app}"
    handlers, side = tmp_path / "pg_handlers.py", tmp_path / "done.txt"
    handlers.write_text(HANDLERS)

    submitted = run_gormes(url, "jobs", "submit", "pgwork", "--data", '{"n": 0}', "--json")
    assert submitted.returncode == 0, submitted.stderr
    first = json.loads(submitted.stdout)
    assert first["status"] == "waiting" and first["data"] == {"n": 0}
    again = run_gormes(url, "jobs", "submit", "pgwork", "--data", '{"n": 1}')
    assert again.returncode == 0, again.stderr
    _submit_rest(url, range(2, N_JOBS))  # from one process: a CLI call each is slow
    listed = run_gormes(url, "jobs", "list", "--status", "waiting", "--limit", "1000", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == N_JOBS

    workers = [start_worker(url, handlers, side) for _ in range(2)]
    killed = 0
    try:
        deadline = time.monotonic() + 90
        while completed(schema) < N_JOBS // 3:
            assert time.monotonic() < deadline, "workers made no progress"
            time.sleep(0.05)
        # The server drops every connection of both workers (writers, readers, LISTEN).
        killed = len(admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (app,),
        ))
        while completed(schema) < N_JOBS:
            assert time.monotonic() < deadline, f"not drained: {completed(schema)}/{N_JOBS}"
            assert all(w.poll() is None for w in workers), [w.stderr.read() for w in workers]
            time.sleep(0.1)
        assert all(w.poll() is None for w in workers)  # both survived
        live = query(schema, "SELECT worker_id, beats FROM worker_heartbeats WHERE stopped_at IS NULL")
        assert len(live) == 2 and all(beats >= 1 for _, beats in live)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        outputs = [w.communicate(timeout=30)[1] for w in workers]
    assert killed >= 2  # each worker had connections open
    assert [w.returncode for w in workers] == [0, 0], outputs
    assert not any("Traceback" in out or "error" in out for out in outputs), outputs

    rows = query(schema, "SELECT id, status, attempts_made, max_attempts FROM jobs")
    completions = Counter(
        stream.removeprefix("job-") for (stream,) in
        query(schema, "SELECT stream FROM events WHERE type = 'job.completed'")
    )
    last_claim_token = dict(query(
        schema,
        "SELECT substr(stream, 5), data::jsonb ->> 'lock_token' FROM events"
        " WHERE type = 'job.claimed' ORDER BY position",
    ))
    ran = [tuple(line.split()) for line in side.read_text().splitlines()]
    assert len(rows) == N_JOBS and {status for _, status, _, _ in rows} == {"completed"}
    assert all(made <= most for _, _, made, most in rows)
    assert set(completions) == {job_id for job_id, *_ in rows}
    assert max(completions.values()) == 1  # none completed twice
    assert max(Counter(ran).values()) == 1  # no handler ran twice under one claim
    assert all((job_id, last_claim_token[job_id]) in set(ran) for job_id in completions)
    stopped = query(schema, "SELECT count(*) FROM worker_heartbeats WHERE stopped_at IS NOT NULL")
    assert stopped == [(2,)]

    stats = run_gormes(url, "jobs", "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["by_status"]["completed"] == N_JOBS
    got = run_gormes(url, "jobs", "get", first["id"], "--json")
    assert json.loads(got.stdout)["result"] == {"n": 0}


LEASE_HANDLERS = """
import os
import trio
import gormes

MARKER = os.environ["GORMES_MARKER_FILE"]

@gormes.job("hang_once")
async def hang_once(ctx, data):
    if not os.path.exists(MARKER):
        open(MARKER, "w").close()
        await trio.sleep(600)  # its worker is SIGKILLed meanwhile
    return "second time"

@gormes.job("slow")
async def slow(ctx, data):
    await trio.sleep(1.5)  # three times the lease: lives on renewals
    return "slow done"
"""


def test_a_killed_workers_job_is_reclaimed_after_its_lease_and_a_long_job_is_renewed(
    schema: str, tmp_path: Path
):
    url = url_for_schema(schema)
    handlers, marker = tmp_path / "lease_handlers.py", tmp_path / "hung"
    handlers.write_text(LEASE_HANDLERS)
    env = cli_env()
    env["GORMES_MARKER_FILE"] = str(marker)

    def worker() -> subprocess.Popen:
        return subprocess.Popen(
            gormes_command(url, "worker", "--import", str(handlers), "--lease", "500",
                           "--stall-interval", "100", "--stall-grace", "200", "--no-governor"),
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    hung = json.loads(run_gormes(url, "jobs", "submit", "hang_once", "--json").stdout)
    first = worker()
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait()
        slow = json.loads(run_gormes(url, "jobs", "submit", "slow", "--json").stdout)
        second = worker()
        try:
            for job in (hung, slow):
                waited = run_gormes(url, "jobs", "wait", job["id"], "--timeout", "30")
                assert waited.stdout.strip() == "completed", waited.stderr
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=30) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    def types(job_id: str) -> list[str]:
        return [t for (t,) in query(
            schema, "SELECT type FROM events WHERE stream = %s ORDER BY version", (f"job-{job_id}",)
        )]

    assert types(hung["id"]) == [
        "job.submitted", "job.claimed", "job.stalled", "job.claimed", "job.completed",
    ]
    slow_types = types(slow["id"])
    assert slow_types[:2] == ["job.submitted", "job.claimed"] and slow_types[-1] == "job.completed"
    assert slow_types.count("job.lease_renewed") >= 2 and "job.stalled" not in slow_types
    got = json.loads(run_gormes(url, "jobs", "get", hung["id"], "--json").stdout)
    assert got["result"] == "second time" and got["attempts_made"] == 1
    assert got["stalled_counter"] == 1
    beats = query(schema, "SELECT stopped_at IS NULL FROM worker_heartbeats ORDER BY started_at")
    assert beats == [(True,), (False,)]  # the killed worker never said it stopped


def _submit_rest(url: str, ns: range) -> None:
    import trio

    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.open import open_store

    async def main() -> None:
        async with open_store(url) as store:
            queue = await JobQueue.open(store)
            for n in ns:
                await queue.submit("pgwork", {"n": n})

    trio.run(main)


def test_bad_postgres_targets_are_one_line_errors(schema: str, tmp_path: Path):
    unreachable = "postgresql://gormes:secret@127.0.0.1:1/nowhere"
    for args in (("jobs", "submit", "x"), ("jobs", "list"), ("worker",)):
        line = assert_one_line_error(run_gormes(unreachable, *args))
        assert "cannot connect to PostgreSQL" in line and "secret" not in line

    # wrong credentials (the server trusts 127.0.0.1, so a role it does not know)
    # and a database that does not exist: the server's reason, password hidden
    server = PG_URL.split("@", 1)[1].split("/", 1)[0]
    for url, reason in (
        (f"postgresql://nosuchrole:secret@{server}/test", 'role "nosuchrole" does not exist'),
        (f"postgresql://postgres@{server}/nosuchdb", 'database "nosuchdb" does not exist'),
    ):
        line = assert_one_line_error(run_gormes(url, "jobs", "list"))
        assert "cannot connect to PostgreSQL" in line and reason in line and "secret" not in line

    admin(f'CREATE TABLE "{schema}".invoices(id integer)')
    foreign = url_for_schema(schema)
    for args in (("jobs", "submit", "x"), ("worker",)):
        result = run_gormes(foreign, *args)
        line = assert_one_line_error(result)
        assert "holds tables of another application" in line
    assert query(schema, "SELECT table_name FROM information_schema.tables"
                 " WHERE table_schema = current_schema()") == [("invoices",)]
