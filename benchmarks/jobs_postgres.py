"""Durable jobs on PostgreSQL: end-to-end no-op jobs/s with 1 and 4 gormes worker
processes against procrastinate with 1 and 4 worker processes, on the same server.

Workload (the same for both, as in benchmarks/jobs.py): N no-op jobs (2,000 by
default, BENCH_JOBS) are submitted into a fresh, empty schema first; then the
worker processes are started and the clock runs from just before their start
until every job is recorded as done (gormes: `completed` in the ledger;
procrastinate: `succeeded` in procrastinate_jobs). Worker start-up (imports,
connecting) is inside the measured time for both.

Parallelism: each worker process runs up to C jobs at once (BENCH_CONCURRENCY,
default 128 as in benchmarks/jobs.py, the same C for both libraries).
procrastinate's connection pool per process is min(C, 16) connections
(BENCH_PROCRASTINATE_POOL) instead of its default 4, and 4 processes of it stay
under the server's default max_connections=100; on this machine its throughput
hardly changed between C=16 and C=128 or between pools of 4 and 16. Both run
with the server's default durability (synchronous_commit=on).

    vs_procrastinate    = gormes_jobs_per_s_4w / procrastinate_jobs_per_s
    vs_procrastinate_1w = gormes_jobs_per_s_1w / procrastinate_jobs_per_s_1w

`procrastinate_jobs_per_s` is procrastinate with 4 worker processes, so the
headline ratio is 4 processes against 4 with the same per-process concurrency;
the 1-process pair is reported too. Each figure is the median of BENCH_REPEATS
(3) rounds; a round runs the four measurements interleaved, so load from
elsewhere on the machine falls on both libraries alike; a measurement during
which the (shared) server restarted is thrown away and taken again. Every
schema this creates is dropped at the end, also when a run fails.

procrastinate is asyncio-based; it runs only in subprocesses of its own (a small
app module written to the scratch directory), so no asyncio mixes with trio.

The server is GORMES_BENCH_PG_URL (default postgresql://postgres@127.0.0.1:5432/test).
Prints one JSON line.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median, progress, report, scratch_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PG_URL = os.environ.get("GORMES_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
N_JOBS = int(os.environ.get("BENCH_JOBS", "2000"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "128"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
# procrastinate's connections per worker process (4 processes stay under the
# server's default max_connections=100)
POOL_MAX = int(os.environ.get("BENCH_PROCRASTINATE_POOL", "16"))

HANDLERS = """
import gormes

@gormes.job("noop")
async def noop(ctx, data):
    return None
"""

PROCRASTINATE_APP = """
import asyncio
import sys

import procrastinate

POOL_MAX = {pool_max}
URL, CONCURRENCY = sys.argv[2], int(sys.argv[3])
app = procrastinate.App(connector=procrastinate.PsycopgConnector(
    conninfo=URL, min_size=1, max_size=min(POOL_MAX, max(4, CONCURRENCY))))

@app.task(name="noop")
async def noop():
    return None

async def setup(n):
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        for start in range(0, n, 500):
            await noop.batch_defer_async(*({{}} for _ in range(min(500, n - start))))

async def work():
    async with app.open_async():
        await app.run_worker_async(concurrency=CONCURRENCY, wait=True,
                                   install_signal_handlers=True)

def cli():
    if sys.argv[1] == "setup":
        asyncio.run(setup(int(sys.argv[4])))
    else:
        asyncio.run(work())
"""


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    e.pop("GORMES_DB", None)
    return e


def admin(sql: str, retry_for: float = 0.0) -> list[tuple]:
    """Run one statement; retry while the server is unreachable, for up to retry_for s."""
    deadline = time.monotonic() + retry_for
    while True:
        try:
            with psycopg.connect(PG_URL, autocommit=True, connect_timeout=5) as conn:
                cur = conn.execute(sql)
                return cur.fetchall() if cur.description else []
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


class Schema:
    """A fresh schema on the server, dropped with everything in it on exit."""

    def __init__(self, prefix: str) -> None:
        self.name = f"{prefix}_{secrets.token_hex(4)}"

    def __enter__(self) -> Schema:
        admin(f'CREATE SCHEMA "{self.name}"')
        return self

    def __exit__(self, *exc: object) -> None:
        # the server is shared: ride out someone else's restart of it
        admin(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE', retry_for=120)

    @property
    def url(self) -> str:
        sep = "&" if "?" in PG_URL else "?"
        return f"{PG_URL}{sep}options=-csearch_path%3D{self.name}"

    def count(self, sql: str) -> int:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql).fetchone()[0]


class ServerRestarted(Exception):
    """The shared server went away during a timed run: that figure is void."""


def server_started_at() -> object:
    return admin("SELECT pg_postmaster_start_time()", retry_for=120)[0][0]


def measured(run: Callable[[], float]) -> float:
    """run(), again (up to 5 times) when the server restarted under it: the machine's
    server is shared, and a restart mid-run would time the outage, not the queue."""
    for _ in range(5):
        started = server_started_at()
        try:
            result = run()
        except (ServerRestarted, psycopg.OperationalError):
            result = None
        except Exception:
            if server_started_at() == started:
                raise  # a real failure, not the outage
            result = None
        if result is not None and server_started_at() == started:
            return result
        progress("  the server restarted during the run; measuring again")
        time.sleep(2)
    raise RuntimeError("the server kept restarting; no measurement")


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def timed_drain(schema: Schema, start_workers: Callable[[], list[subprocess.Popen]],
                done_sql: str) -> float:
    """Start the workers, poll `done_sql` (on one connection opened beforehand)
    until it counts N_JOBS; jobs per second."""
    poll = psycopg.connect(schema.url, autocommit=True)
    start = time.perf_counter()
    procs = start_workers()
    deadline = time.monotonic() + 600
    try:
        while (done := poll.execute(done_sql).fetchone()[0]) < N_JOBS:
            if time.monotonic() > deadline:
                raise TimeoutError(f"benchmark did not finish: {done} of {N_JOBS} done")
            dead = [p.returncode for p in procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a worker exited early with status {dead[0]}")
            time.sleep(0.005)
        elapsed = time.perf_counter() - start
    except psycopg.OperationalError as exc:
        raise ServerRestarted from exc
    finally:
        stop(procs)
        poll.close()
    return N_JOBS / elapsed


# -- gormes ------------------------------------------------------------------------


def gormes_cmd(url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "gormes", "--db", url, *args]


def submit_gormes(url: str, n: int) -> None:
    import trio

    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.open import open_store

    async def main() -> None:
        async with open_store(url) as store:
            queue = await JobQueue.open(store)
            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(queue.submit, "noop", None)

    trio.run(main)


def gormes_throughput(tmp: Path, workers: int) -> float:
    handlers = tmp / "bench_handlers.py"
    handlers.write_text(HANDLERS)
    with Schema("gormes_bench") as schema:
        submit_gormes(schema.url, N_JOBS)
        assert schema.count("SELECT count(*) FROM jobs") == N_JOBS

        def start() -> list[subprocess.Popen]:
            return [
                subprocess.Popen(
                    gormes_cmd(schema.url, "worker", "--import", str(handlers),
                               "--concurrency", str(CONCURRENCY)),
                    env=env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                for _ in range(workers)
            ]

        return timed_drain(schema, start, "SELECT count(*) FROM jobs WHERE status = 'completed'")


# -- procrastinate ---------------------------------------------------------------------


def procrastinate_throughput(tmp: Path, workers: int) -> float:
    (tmp / "procrastinate_bench_app.py").write_text(PROCRASTINATE_APP.format(pool_max=POOL_MAX))
    # Imported, not run as __main__ (procrastinate warns about an app in __main__).
    app = [sys.executable, "-c", "import procrastinate_bench_app as a; a.cli()"]
    app_env = env()
    app_env["PYTHONPATH"] = str(tmp) + os.pathsep + app_env["PYTHONPATH"]
    with Schema("procrastinate_bench") as schema:
        subprocess.run(
            [*app, "setup", schema.url, str(CONCURRENCY), str(N_JOBS)],
            env=app_env, check=True, stdout=subprocess.DEVNULL,
        )
        assert schema.count("SELECT count(*) FROM procrastinate_jobs") == N_JOBS

        def start() -> list[subprocess.Popen]:
            return [
                subprocess.Popen(
                    [*app, "work", schema.url, str(CONCURRENCY)],
                    env=app_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                for _ in range(workers)
            ]

        return timed_drain(
            schema, start, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        )


def main() -> None:
    only = os.environ.get("BENCH_ONLY")  # "gormes" or "procrastinate": half a run, no ratio
    runs: dict[str, list[float]] = {}
    with scratch_dir() as tmp:
        for r in range(REPEATS):  # rounds interleave the two, so noise hits both alike
            for workers in (1, 4):
                if only != "procrastinate":
                    progress(f"round {r + 1}: gormes, {workers} worker process(es)")
                    runs.setdefault(f"gormes_{workers}w", []).append(
                        measured(lambda w=workers: gormes_throughput(tmp, w)))
                if only != "gormes":
                    progress(f"round {r + 1}: procrastinate, {workers} worker process(es)")
                    runs.setdefault(f"procrastinate_{workers}w", []).append(
                        measured(lambda w=workers: procrastinate_throughput(tmp, w)))
    results = {key: median(values) for key, values in runs.items()}
    out: dict[str, object] = {"jobs": N_JOBS}
    if "gormes_1w" in results:
        out["gormes_jobs_per_s_1w"] = round(results["gormes_1w"], 1)
        out["gormes_jobs_per_s_4w"] = round(results["gormes_4w"], 1)
    if "procrastinate_1w" in results:
        out["procrastinate_jobs_per_s"] = round(results["procrastinate_4w"], 1)
        out["procrastinate_jobs_per_s_1w"] = round(results["procrastinate_1w"], 1)
    if len(results) == 4:
        out["vs_procrastinate"] = round(results["gormes_4w"] / results["procrastinate_4w"], 2)
        out["vs_procrastinate_1w"] = round(results["gormes_1w"] / results["procrastinate_1w"], 2)
    out.update({
        "repeats": REPEATS,
        "concurrency_per_process": CONCURRENCY,
        "durability": "synchronous_commit=on (both)",
        "procrastinate": _version("procrastinate"),
    })
    report(out)


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    main()
