"""What a fold kept in the database saves: the doctor's log summary and `/metrics`' counters (decision 0084).

One log of SIZE events (BENCH_KEPT_FOLDS_SIZE, 200,000 by default): runs of eight
events (`run.started`, six `run.llm_turn` with their usage, `run.completed`) and
two notes after each. Then SAMPLES times, for each measurement: the fold kept up
to the head (not timed), NEW more such events appended, and the measurement (so
a kept fold has exactly NEW events to fold):

- the doctor (`run_doctor`, --offline, every check): `doctor_ms.incremental`, a
  run that takes up the summary the last one kept, against the comparator
  `doctor_ms.full`, a `--full` run over the same log (the fold from position 0,
  as every run on PostgreSQL was before); and the fold alone
  (`scan.fold_log`, on a read-only connection of its own): `fold_ms.incremental`
  from the kept summary, `fold_ms.full` from position 0;
- `/metrics`' first scrape of a new collector (`LogMetrics.prepare` and
  `snapshot`, as a daemon's first scrape after a restart): `first_scrape_ms.kept`,
  taking up the counters the last collector kept (`keep`), against
  `first_scrape_ms.cold`, the same with nothing kept (the row deleted first; the
  fold from position 0). Both must count the same (asserted). Timed whole: the
  daemon's scrape gives up after 10 s (`timeout_s`, the fold going on at the next
  scrape), which the cold one may take longer than.

Kept and full/cold alternate which goes first. `ratio`s: full over incremental,
cold over kept (how much the kept fold saves; it grows with the log, since the
kept run costs what was appended, NEW events, and the other the whole log).
SQLite with durability `normal`, and PostgreSQL when GORMES_TEST_PG_URL's server
(or 127.0.0.1:5432) can be reached (BENCH_KEPT_FOLDS_BACKENDS=sqlite for one).
One JSON line per backend.

    .venv/bin/python benchmarks/kept_folds.py
    .venv/bin/python benchmarks/kept_folds.py --quick   # the smoke test's run: small, SQLite only
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import trio

sys.path.insert(0, str(Path(__file__).parent))
from _common import PAYLOAD, median, progress, report, scratch_dir  # noqa: E402
from gateway_refusals import PG_URL, postgres_reachable  # noqa: E402

from gormes.actors.jobs.queue import JobQueue  # noqa: E402
from gormes.doctor import run_doctor  # noqa: E402
from gormes.events import kept_fold  # noqa: E402
from gormes.events.catalog import load_all  # noqa: E402
from gormes.events.codec import default_codec  # noqa: E402
from gormes.events.jobs import Tokens  # noqa: E402
from gormes.events.notes import NoteAdded  # noqa: E402
from gormes.events.runs import RecordedReply, RunCompleted, RunLlmTurn, RunStarted  # noqa: E402
from gormes.events.scratch_store import scratch_store  # noqa: E402
from gormes.health import scan  # noqa: E402
from gormes.telemetry.metrics import KEEP_ROW, KEEP_TABLE, LogMetrics  # noqa: E402

QUICK = "--quick" in sys.argv
SIZE = 4_000 if QUICK else int(os.environ.get("BENCH_KEPT_FOLDS_SIZE", "200000"))
NEW = 100 if QUICK else 1_000
SAMPLES = 3 if QUICK else 5
PER_RUN = 10  # events: a run's eight and two notes
RUNS_A_TRANSACTION = 500
# The daemon's scrape gives up after 10 s (the fold goes on at the next scrape); the
# cold comparator may take longer than that over a large log: timed whole here.
SCRAPE_TIMEOUT_S = 3600.0


def _run_events(run: str) -> list[Any]:
    turns = [RunLlmTurn(seq=seq, request_hash="v2:" + "0" * 64, model="bench-model", message_count=seq,
                        reply=RecordedReply(content=PAYLOAD[:40]), usage=Tokens(input=120, output=30))
             for seq in range(1, 7)]
    return [RunStarted(run_id=run, handler="agent", handler_version="x"), *turns, RunCompleted()]


class Log:
    def __init__(self, store: Any) -> None:
        self.store = store
        self.runs = 0

    async def add(self, events: int) -> None:
        """`events` more (a multiple of PER_RUN), RUNS_A_TRANSACTION runs a transaction."""
        left = events // PER_RUN
        while left:
            n = min(left, RUNS_A_TRANSACTION)
            first = self.runs

            def write(tx: Any, first: int = first, n: int = n) -> None:
                for i in range(first, first + n):
                    tx.append(f"run-bench-{i:08d}", _run_events(f"bench-{i:08d}"))
                    tx.append(f"notes-{i % 64}", [NoteAdded(text=PAYLOAD), NoteAdded(text=PAYLOAD)])

            await self.store.transact(write)
            self.runs += n
            left -= n


async def timed(run: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    found = await run()
    return (time.perf_counter() - start) * 1000, found


def known(type_: str, version: int) -> bool:
    cls = default_codec.class_for(type_)
    return cls is not None and version <= cls.schema_version


def target_of(store: Any) -> Any:
    if getattr(store, "dialect", "sqlite") == "postgres":
        sep = "&" if "?" in PG_URL else "?"
        return f"{PG_URL}{sep}options=-csearch_path%3D{store.schema}"
    return store.path


def doctor(target: Any, full: bool) -> float:
    start = time.perf_counter()
    report_ = run_doctor(target, offline=True, full=full, modules=lambda name: True)
    elapsed = (time.perf_counter() - start) * 1000
    assert report_.checks[0].status == "ok", report_.checks[0]
    return elapsed


async def fold(store: Any, start: scan.LogSummary) -> tuple[float, scan.LogSummary]:
    copy = msgspec.json.decode(msgspec.json.encode(start), type=scan.LogSummary)  # fold_log changes it
    return await timed(lambda: store.read_sql(lambda conn: scan.fold_log(conn, copy, known)))


async def first_scrape(store: Any) -> tuple[float, Any]:
    collector = LogMetrics(store, timeout_s=SCRAPE_TIMEOUT_S)

    async def scrape() -> Any:
        await collector.prepare()
        return await collector.snapshot()

    return await timed(scrape)


async def measure(backend: str, d: Path) -> dict[str, Any]:
    async with scratch_store(d / "kept.db" if backend == "sqlite" else PG_URL, "gormes_bench") as store:
        await JobQueue.open(store)  # the ledger a scrape reads
        log = Log(store)
        progress(f"kept_folds {backend}: {SIZE:,} events ...")
        await log.add(SIZE)
        if backend == "postgres":
            await store.transact(lambda tx: tx.execute("ANALYZE events"))
        target = target_of(store)
        doctor(target, full=True)  # the first run keeps its summary
        collector = LogMetrics(store, timeout_s=SCRAPE_TIMEOUT_S)
        await collector.snapshot()
        assert await collector.keep()
        times: dict[str, dict[str, list[float]]] = {
            "doctor_ms": {"incremental": [], "full": []}, "fold_ms": {"incremental": [], "full": []},
            "first_scrape_ms": {"kept": [], "cold": []}}
        for i in range(SAMPLES):
            kept_first = i % 2 == 0
            progress(f"kept_folds {backend}: sample {i + 1} of {SAMPLES} ...")
            for kept in (kept_first, not kept_first):
                await trio.to_thread.run_sync(doctor, target, False)  # kept up to the head (not timed)
                await log.add(NEW)
                times["doctor_ms"]["incremental" if kept else "full"].append(
                    await trio.to_thread.run_sync(doctor, target, not kept))
            await log.add(NEW)
            remembered = await store.read_sql(scan.load)
            assert remembered is not None and remembered.position == await store.head() - NEW
            for kept in (kept_first, not kept_first):
                elapsed, summary = await fold(store, remembered if kept else scan.LogSummary())
                times["fold_ms"]["incremental" if kept else "full"].append(elapsed)
                assert summary.count == (remembered.count + NEW if kept else await store.head())
            keeper = LogMetrics(store, timeout_s=SCRAPE_TIMEOUT_S)
            await keeper.snapshot()
            await keeper.keep()  # kept up to the head (not timed)
            await log.add(NEW)
            row = await store.read_sql(lambda conn: kept_fold.read(conn, KEEP_TABLE, KEEP_ROW))
            assert row is not None and row[0] == await store.head() - NEW
            counted = {}
            for kept in (kept_first, not kept_first):
                if kept:
                    await store.transact(lambda tx: kept_fold.write(tx, KEEP_TABLE, KEEP_ROW, *row))
                else:
                    await store.transact(lambda tx: tx.execute(f"DELETE FROM {KEEP_TABLE}"))
                elapsed, snap = await first_scrape(store)
                times["first_scrape_ms"]["kept" if kept else "cold"].append(elapsed)
                counted[kept] = (snap.attempts, snap.stalls, snap.by_model)
            assert counted[True] == counted[False], counted
    result: dict[str, Any] = {k: {n: round(median(v), 3) for n, v in by.items()} for k, by in times.items()}
    result["doctor_ratio"] = round(median(times["doctor_ms"]["full"]) / median(times["doctor_ms"]["incremental"]), 2)
    result["fold_ratio"] = round(median(times["fold_ms"]["full"]) / median(times["fold_ms"]["incremental"]), 2)
    result["scrape_ratio"] = round(median(times["first_scrape_ms"]["cold"])
                                   / median(times["first_scrape_ms"]["kept"]), 2)
    return result


async def main() -> None:
    load_all()
    backends = ["sqlite"] + (["postgres"] if not QUICK and postgres_reachable() else [])
    only = os.environ.get("BENCH_KEPT_FOLDS_BACKENDS")
    if only:
        backends = [b for b in backends if b in only.split(",")]
    with scratch_dir() as d:
        for backend in backends:
            result: dict[str, Any] = {"benchmark": "kept_folds", "backend": backend, "events": SIZE, "new": NEW,
                                      "samples": SAMPLES}
            result.update(await measure(backend, d))
            report(result)


if __name__ == "__main__":
    trio.run(main)
