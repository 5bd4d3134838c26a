"""Durable jobs: end-to-end no-op throughput against huey's SqliteHuey, and idle pickup latency.

Throughput: 20,000 no-op jobs (`BENCH_JOBS`) are submitted, then one worker process is started
and the clock runs from its start until every job is recorded as done (gormes:
`completed` in the ledger; huey: a result stored for every task). The driver looks
for the end every 5 ms on one connection, with a query whose cost does not grow
with the jobs done, and reports its own CPU meanwhile (`*_observer_cpu_s`,
decision 0049). Both stores are SQLite in WAL mode with synchronous=FULL (huey:
`SqliteHuey(fsync=True)`, which sets `PRAGMA synchronous=2`; WAL is its default
journal mode).

Pickup: with a gormes worker idle, one job at a time is submitted; the handler
stamps time.time() when it starts; latency = start stamp - time before submit.

Robustness and fairness (the machine is shared and noisy): each throughput is
the median of `BENCH_RUNS` (default 3) runs, each on a fresh database, gormes
and huey runs interleaved so that both meet the same load. Before the first
timed run the gormes package is byte-compiled (`compileall`, as `pip install`
does for an installed package such as huey): with PYTHONDONTWRITEBYTECODE set,
or a tree whose caches are stale, the worker would otherwise compile its own
source inside the timed window while huey loads compiled code. Nothing else
moves out of the window: the worker's imports, its store and ledger set-up and
every claim and completion are timed, as is huey's consumer start-up.

Supplementary figures (not the target, which is the end-to-end one above): each
round also times both systems draining ONE job, which is mostly the process
start-up (imports, opening the store); `*_drain_jobs_per_s` is the N-job run's
rate with that taken out, the rate of a worker that is already running.

Context for the target, also measured in the run: `python_trio_start_s` is a
bare `python -c "import trio"` (median of 5), the least any worker whose actors
are trio tasks takes before its first job; `five_x_budget_s` is the whole time
gormes may take for the N jobs to be 5 times huey (N / (5 x huey's jobs/s)).

CPU: each worker's (and huey consumer's) user+sys CPU, read with
`resource.getrusage(RUSAGE_CHILDREN)` around the process (start-up and shutdown
included), is reported per job (`*_cpu_us_per_job`, medians); with the one-job
run's CPU taken out, `gormes_drain_cpu_us_per_job` is the CPU a job costs a
running worker.

Where it goes (`BENCH_PROFILE`, default on; 0 skips it): after the timed runs,
one more gormes worker drains N jobs under cProfile (benchmarks/profile_worker.py:
the main thread and the store's writer thread both, since `python -m cProfile`
sees the main thread only and the writer does the claims, completions, ledger
and commits). `profile_top` lists the costliest gormes functions by cumulative
share of the profiled CPU (the trio loop's wait in epoll taken out); profiling
slows the worker down about twofold, so the shares are what to read, not times.

Prints one JSON line.
"""

from __future__ import annotations

import compileall
import json
import os
import pstats
import resource
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from gormes.projections.ledger import LIVE_JOBS

REPO = Path(__file__).resolve().parents[1]
N_JOBS = int(os.environ.get("BENCH_JOBS", "20000"))
N_PICKUPS = int(os.environ.get("BENCH_PICKUPS", "200"))
GORMES_CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "128"))
HUEY_WORKERS = int(os.environ.get("BENCH_HUEY_WORKERS", "8"))
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
PROFILE = os.environ.get("BENCH_PROFILE", "1") != "0"
PROFILE_TOP = 10

HANDLERS = """
import time
import gormes

@gormes.job("noop")
async def noop(ctx, data):
    return None

@gormes.job("stamp")
async def stamp(ctx, data):
    return time.time()
"""

HUEY_APP = """
from huey import SqliteHuey
huey = SqliteHuey("bench", filename={db!r}, fsync=True)

@huey.task()
def noop():
    return True
"""


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    return e


def gormes(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "gormes", "--db", str(db), *args]


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def children_cpu() -> float:
    """User+sys CPU seconds of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wait_until(check, timeout: float = 300.0, every: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark did not finish")
        time.sleep(every)


class Drain(NamedTuple):
    jobs_per_s: float
    cpu_s: float  # the worker's (or consumer's) user+sys CPU
    observer_cpu_s: float  # the driver's own CPU while it watched for the end


# The clock stops when the driver sees the last job done. It looks every 5 ms, on
# one connection opened before the worker starts, with a query whose cost does not
# grow with the jobs done, and counts once when that query says the end came. It
# used to open the file and count the jobs done at every look: 0.3-0.5 s of the
# driver's CPU during a ~2 s gormes drain, a fifth of one of this machine's two
# cores taken from the run being measured (decision 0049).
def watch_until_done(
    db: Path, running_sql: str, params: tuple[object, ...], done: Callable[[], bool]
) -> Callable[[], float]:
    """Open the watch now (before the worker starts); the function returned waits
    until `running_sql` answers false and `done()` holds, and gives back the
    driver's CPU seconds spent waiting."""
    conn = sqlite3.connect(db, timeout=30)
    conn.execute(running_sql, params).fetchone()  # the schema is read outside the window

    def wait() -> float:
        cpu = time.process_time()
        try:
            wait_until(lambda: not conn.execute(running_sql, params).fetchone()[0] and done())
        finally:
            conn.close()
        return time.process_time() - cpu

    return wait


# -- gormes ------------------------------------------------------------------------


def submit_gormes(db: Path, n: int) -> None:
    import trio

    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.sqlite import SQLiteEventStore

    async def main() -> None:
        async with SQLiteEventStore.open(db) as store:
            queue = await JobQueue.open(store)
            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(queue.submit, "noop", None)

    trio.run(main)


def completed_count(db: Path) -> int:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute("SELECT count(*) FROM jobs WHERE status = 'completed'").fetchone()[0]
    finally:
        conn.close()


# Whether any job has not ended: the first entry of the partial index of unended
# jobs, whatever the ledger's size (its WHERE spelt as the index's, so SQLite uses it).
GORMES_RUNNING = f"SELECT EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_unended WHERE {LIVE_JOBS})"


def all_completed(db: Path, n: int) -> bool:
    """Once no job is left unended: every one of the `n` completed (a no-op job
    that ended otherwise is a failed benchmark, not a slow one)."""
    completed = completed_count(db)
    if completed != n:
        raise RuntimeError(f"{completed} of {n} jobs completed; the others ended otherwise")
    return True


def gormes_throughput(tmp: Path, n: int = N_JOBS, profile: Path | None = None) -> Drain:
    """Draining `n` jobs with one worker; with `profile`, the worker runs under
    benchmarks/profile_worker.py, which writes its stats there."""
    db = tmp / "gormes.db"
    handlers = tmp / "bench_handlers.py"
    handlers.write_text(HANDLERS)
    submit_gormes(db, n)
    args = ["--db", str(db), "worker", "--import", str(handlers), "--concurrency", str(GORMES_CONCURRENCY)]
    if profile is None:
        command = [sys.executable, "-m", "gormes", *args]
    else:
        command = [sys.executable, str(REPO / "benchmarks" / "profile_worker.py"), str(profile), *args]
    wait = watch_until_done(db, GORMES_RUNNING, (), lambda: all_completed(db, n))
    cpu_before = children_cpu()
    start = time.perf_counter()
    worker = subprocess.Popen(command, env=env(), cwd=REPO, stderr=subprocess.DEVNULL)  # `-m`: cwd first on sys.path
    try:
        observer_cpu = wait()
        elapsed = time.perf_counter() - start
    finally:
        stop(worker)
    return Drain(n / elapsed, children_cpu() - cpu_before, observer_cpu)


def gormes_pickup(tmp: Path) -> list[float]:
    import trio

    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.sqlite import SQLiteEventStore

    db = tmp / "pickup.db"
    handlers = tmp / "bench_handlers.py"
    handlers.write_text(HANDLERS)
    latencies: list[float] = []

    async def main() -> None:
        async with SQLiteEventStore.open(db) as store:
            queue = await JobQueue.open(store)
            warm = await queue.submit("stamp", None)
            await until_done(store, queue, warm.id)
            for _ in range(N_PICKUPS):
                await trio.sleep(0.02)  # the worker is idle again
                before = time.time()
                job = await queue.submit("stamp", None)
                done = await until_done(store, queue, job.id)
                latencies.append((done.result - before) * 1000)

    async def until_done(store, queue, job_id):
        while True:
            seen = store.generation
            job = await queue.get(job_id)
            if job.status == "completed":
                return job
            await store.wait_for_change(seen)

    # The ledger must exist before the worker starts, so create it here first.
    async def init() -> None:
        async with SQLiteEventStore.open(db) as store:
            await JobQueue.open(store)

    trio.run(init)
    worker = subprocess.Popen(
        gormes(db, "worker", "--import", str(handlers), "--concurrency", "4"),
        env=env(), cwd=REPO, stderr=subprocess.DEVNULL,
    )
    try:
        trio.run(main)
    finally:
        stop(worker)
    return latencies


# -- huey ------------------------------------------------------------------------------


# Whether results are still missing: huey only adds to `kv` (no result is read,
# so none is deleted), so its last rowid is the count of results so far.
HUEY_RUNNING = "SELECT coalesce(max(rowid), 0) < ? FROM kv"


def huey_throughput(tmp: Path, n: int = N_JOBS) -> Drain:
    db = tmp / "huey.db"
    app = tmp / "huey_bench_app.py"
    app.write_text(HUEY_APP.format(db=str(db)))
    sys.path.insert(0, str(tmp))
    try:
        sys.modules.pop("huey_bench_app", None)  # each run has its own app and database
        import huey_bench_app  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    for _ in range(n):
        huey_bench_app.noop()
    consumer_env = env()
    consumer_env["PYTHONPATH"] = str(tmp) + os.pathsep + consumer_env["PYTHONPATH"]

    def results() -> int:
        conn = sqlite3.connect(db, timeout=30)
        try:
            return conn.execute("SELECT count(*) FROM kv").fetchone()[0]
        finally:
            conn.close()

    wait = watch_until_done(db, HUEY_RUNNING, (n,), lambda: results() >= n)
    cpu_before = children_cpu()
    start = time.perf_counter()
    consumer = subprocess.Popen(
        [sys.executable, "-m", "huey.bin.huey_consumer", "huey_bench_app.huey",
         "-w", str(HUEY_WORKERS), "-k", "thread", "-d", "0.001", "-q"],
        env=consumer_env, cwd=tmp, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    )
    try:
        observer_cpu = wait()
        elapsed = time.perf_counter() - start
    finally:
        stop(consumer)
    return Drain(n / elapsed, children_cpu() - cpu_before, observer_cpu)


def drain_rate(jobs_per_s: float, one_job_s: float) -> float | None:
    """Jobs per second once started: (N - 1) jobs over (N-job time - one-job time);
    None when the difference is lost in the noise (not positive)."""
    rest = N_JOBS / jobs_per_s - one_job_s
    return round((N_JOBS - 1) / rest, 1) if rest > 0 else None


def python_trio_start() -> float:
    """Seconds for a fresh `python -c "import trio"` (median of 5)."""
    times = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import trio"], check=True, env=env())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def profile_top(path: Path, top: int = PROFILE_TOP) -> tuple[list[dict[str, object]], dict[str, float]]:
    """The gormes functions with the largest cumulative share of the profiled CPU
    (every function's own time summed over both threads, less the trio loop's
    wait in epoll: idle, not CPU), and the shares of three parts: the writer
    thread's transactions, the sqlite3 calls (SQLite itself: statements, commits
    with their fsync) and trio's own code (scheduling tasks, cancel scopes, the
    thread hand-offs). Frames that only hold others' work (the CLI, the worker's
    `run`, the store's writer loop and transaction wrappers) are left out."""
    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    idle = sum(tt for (file, _, name), (_, _, tt, _, _) in stats.items() if "poll" in name and "epoll" in name)
    total = sum(tt for (_, _, tt, _, _) in stats.values()) - idle
    writer = sum(ct for (file, _, name), (_, _, _, ct, _) in stats.items()
                 if file.endswith(os.path.join("gormes", "events", "sqlite.py")) and name == "_commit")
    sqlite_calls = sum(tt for (file, _, name), (_, _, tt, _, _) in stats.items()
                       if file == "~" and "sqlite3" in name)
    trio_own = sum(tt for (file, _, name), (_, _, tt, _, _) in stats.items()
                   if os.sep + "trio" + os.sep in file)
    parts = {
        "writer_thread": round(writer / total, 3),
        "sqlite3_calls": round(sqlite_calls / total, 3),
        "trio_internals": round(trio_own / total, 3),
    }
    root = str(REPO) + os.sep
    holders = ("gormes/cli/", "gormes/__main__.py")
    rows = []
    for (file, line, name), (_, calls, _, ct, _) in stats.items():
        if not file.startswith(root + "gormes" + os.sep):
            continue
        rel = file[len(root):]
        if rel.startswith(holders) or (rel, name) in _WRAPPERS:
            continue
        rows.append((ct, f"{rel}:{line}({name})", calls))
    rows.sort(reverse=True)
    return [
        {"function": where, "cumulative_share": round(ct / total, 3), "calls": calls}
        for ct, where, calls in rows[:top]
    ], parts


# Frames that only hold others' work: the worker's and the store's loops.
_WRAPPERS = {
    ("gormes/actors/jobs/worker.py", "run"),
    ("gormes/events/sqlite.py", "_commit"),
    ("gormes/events/sqlite.py", "_writer"),
    ("gormes/events/store_base.py", "_writer"),
    ("gormes/events/sqlite.py", "_run_transact"),
    ("gormes/events/write_batch.py", "run"),
    ("gormes/actors/jobs/queue.py", "<lambda>"),
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    compileall.compile_dir(REPO / "gormes", quiet=1)
    gs: list[float] = []
    hs: list[float] = []
    g1: list[float] = []  # seconds to start and drain ONE job: mostly process start-up
    h1: list[float] = []
    g_cpu: list[float] = []  # the worker's user+sys CPU seconds, N jobs
    h_cpu: list[float] = []
    g1_cpu: list[float] = []  # ... and one job
    h1_cpu: list[float] = []
    g_watch: list[float] = []  # the driver's CPU watching for the end, N jobs
    h_watch: list[float] = []
    top: list[dict[str, object]] | None = None
    parts: dict[str, float] | None = None
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for i in range(RUNS):
            run_dir = tmp / f"run{i}"
            run_dir.mkdir()
            for rates, cpus, watches, drain in (
                (gs, g_cpu, g_watch, gormes_throughput(run_dir)),
                (hs, h_cpu, h_watch, huey_throughput(run_dir)),
            ):
                rates.append(drain.jobs_per_s)
                cpus.append(drain.cpu_s)
                watches.append(drain.observer_cpu_s)
            one_dir = tmp / f"one{i}"
            one_dir.mkdir()
            for times, cpus, drain in (
                (g1, g1_cpu, gormes_throughput(one_dir, 1)), (h1, h1_cpu, huey_throughput(one_dir, 1)),
            ):
                times.append(1 / drain.jobs_per_s)
                cpus.append(drain.cpu_s)
        pickups = gormes_pickup(tmp)
        if PROFILE:
            profile_dir = tmp / "profile"
            profile_dir.mkdir()
            gormes_throughput(profile_dir, profile=profile_dir / "worker.prof")
            top, parts = profile_top(profile_dir / "worker.prof")
    trio_start = python_trio_start()
    g, h = statistics.median(gs), statistics.median(hs)
    g_start, h_start = statistics.median(g1), statistics.median(h1)
    g_drain, h_drain = drain_rate(g, g_start), drain_rate(h, h_start)
    per_job = lambda cpu: round(statistics.median(cpu) / N_JOBS * 1e6, 1)  # noqa: E731
    drain_cpu = lambda cpu, one: round(  # noqa: E731
        (statistics.median(cpu) - statistics.median(one)) / max(1, N_JOBS - 1) * 1e6, 1
    )
    print(json.dumps({
        "jobs": N_JOBS,
        "gormes_jobs_per_s": round(g, 1),
        "huey_jobs_per_s": round(h, 1),
        "vs_huey": round(g / h, 2),
        "pickup_p50_ms": round(statistics.median(pickups), 2),
        "pickup_p99_ms": round(percentile(pickups, 0.99), 2),
        "gormes_concurrency": GORMES_CONCURRENCY,
        "huey_workers": HUEY_WORKERS,
        "runs": RUNS,
        "gormes_runs_jobs_per_s": [round(x, 1) for x in gs],
        "huey_runs_jobs_per_s": [round(x, 1) for x in hs],
        # Supplementary, not the target: the same runs without process start-up.
        # A one-job run's time (median) stands for start-up; (N - 1) jobs over the
        # rest of the N-job run is the rate of a worker already running.
        "gormes_one_job_s": round(g_start, 3),
        "huey_one_job_s": round(h_start, 3),
        "gormes_drain_jobs_per_s": g_drain,
        "huey_drain_jobs_per_s": h_drain,
        "vs_huey_drain": round(g_drain / h_drain, 2) if g_drain and h_drain else None,
        "python_trio_start_s": round(trio_start, 3),
        "five_x_budget_s": round(N_JOBS / (5 * h), 3),
        "durability": "WAL, synchronous=FULL (both)",
        # CPU (user+sys) of the worker process / jobs, start-up included (medians);
        # drain: the one-job run's CPU taken out (a running worker's cost per job).
        "gormes_cpu_us_per_job": per_job(g_cpu),
        "huey_cpu_us_per_job": per_job(h_cpu),
        "gormes_drain_cpu_us_per_job": drain_cpu(g_cpu, g1_cpu),
        "huey_drain_cpu_us_per_job": drain_cpu(h_cpu, h1_cpu),
        "gormes_one_job_cpu_s": round(statistics.median(g1_cpu), 3),
        # The driver's own CPU while it watched for the end (medians): what the
        # observer took from the machine the run had (decision 0049).
        "gormes_observer_cpu_s": round(statistics.median(g_watch), 3),
        "huey_observer_cpu_s": round(statistics.median(h_watch), 3),
        # Where the worker's CPU goes: cProfile of both of its threads draining N jobs.
        "profile_top": top,
        "profile_parts": parts,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
