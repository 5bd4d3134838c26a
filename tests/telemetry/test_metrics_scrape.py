"""`/metrics` scraped over HTTP while a worker drains jobs, parsed with
prometheus-client's own parser: jobs by queue and status, attempts, claim latency,
worker limits, tokens by model from a recorded run, projection lag, log size."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trio
from pg_helpers import backend_store
from prometheus_client.parser import text_string_to_metric_families

from gormes.actors.jobs.context import JobContext
from gormes.actors.jobs.handlers import default_registry
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.worker import Worker, WorkerConfig
from gormes.events.jsonl import import_lines_in, parse_lines
from gormes.events.notes import NoteAdded
from gormes.events.sqlite import SQLiteEventStore
from gormes.telemetry.metrics import LogMetrics, MetricsServer, WorkerGauge

FIXTURE = Path(__file__).resolve().parents[2] / "replay_fixtures" / "subagents.jsonl"


def scrape(port: int) -> dict[str, list[Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    found = [s.value for s in samples.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


async def until(store: SQLiteEventStore, check: Any) -> None:
    while True:
        seen = store.generation
        if await check():
            return
        await store.wait_for_change(seen)


async def test_metrics_while_a_worker_drains_jobs(tmp_path: Path) -> None:
    release = trio.Event()
    started: list[str] = []

    async def gate(ctx: JobContext, data: Any) -> Any:
        started.append(ctx.id)
        await release.wait()
        return data

    registry = default_registry.copy()
    registry.register("gate", gate)
    async with SQLiteEventStore.open(tmp_path / "m.db") as store:
        await store.transact(lambda tx: import_lines_in(tx, parse_lines(FIXTURE.read_text().splitlines())))
        queue = await JobQueue.open(store)
        for n in range(5):
            await queue.submit("gate", {"n": n}, {"queue": "work"})
        worker = Worker(queue, registry, WorkerConfig(worker_id="w-1", concurrency=2), log=lambda line: None)
        metrics = LogMetrics(store, workers=lambda: [
            WorkerGauge(worker_id=worker.id, limit=worker.limit, active=len(worker.active))])
        server = MetricsServer(metrics, 0)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)

                async def two_active() -> bool:
                    return (await queue.stats()).by_queue.get("work", {}).get("active") == 2
                await until(store, two_active)
                during = await trio.to_thread.run_sync(scrape, server.port)
                assert value(during, "gormes_jobs", queue="work", status="active") == 2
                assert value(during, "gormes_jobs", queue="work", status="waiting") == 3
                assert value(during, "gormes_worker_active_jobs", worker="w-1") == 2
                assert value(during, "gormes_worker_limit", worker="w-1") == 2
                assert value(during, "gormes_job_attempts_total") == 2
                assert value(during, "gormes_job_claim_latency_seconds_count", queue="work") == 2
                # the recorded run's six model turns: 3827 input tokens in all (its total)
                assert value(during, "gormes_model_tokens_total", model="scripted", kind="input") == 3827
                assert value(during, "gormes_model_turns_total", model="scripted") == 6

                release.set()

                async def all_done() -> bool:
                    return (await queue.stats()).by_queue.get("work", {}).get("completed") == 5
                await until(store, all_done)
                after = await trio.to_thread.run_sync(scrape, server.port)
                nursery.cancel_scope.cancel()
        finally:
            server.close()
    assert value(after, "gormes_jobs", queue="work", status="completed") == 5
    assert value(after, "gormes_job_attempts_total") == 5
    assert value(after, "gormes_job_stalls_total") == 0
    assert value(after, "gormes_job_claim_latency_seconds_count", queue="work") == 5
    assert value(after, "gormes_job_claim_latency_seconds_bucket", queue="work", le="+Inf") == 5
    # counted once across scrapes: the fold reads only the rows after the last one
    assert value(after, "gormes_model_tokens_total", model="scripted", kind="input") == 3827
    assert value(after, "gormes_log_events") >= 24 + 5 * 3
    assert value(after, "gormes_log_bytes") > 0
    assert value(after, "gormes_projection_lag_events", projection="ledger") == 0
    assert value(after, "gormes_governor_breaker_trips_total") == 0


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_scrape_moves_past_the_rows_it_does_not_count(backend: str, db_path: Path) -> None:
    """A log whose latest rows are none the counters count (audit records, notes: a
    gateway's traffic) is read once: each scrape folds on to the head, where it
    stopped at the last row it counted and the next scrape read all the rest again
    (on SQLite, with no index of `type`, every one of them, scrape after scrape)."""
    async with backend_store(backend, db_path) as store:
        queue = await JobQueue.open(store)
        await queue.submit("echo", {}, {"queue": "work"})
        await store.append("notes-1", [NoteAdded(text=f"note {n}") for n in range(3000)])
        metrics = LogMetrics(store)
        server = MetricsServer(metrics, 0)
        try:
            first = await trio.to_thread.run_sync(scrape, server.port)
            assert metrics.folded == await store.head() == value(first, "gormes_log_events")
            await store.append("notes-2", [NoteAdded(text="one more")])
            second = await trio.to_thread.run_sync(scrape, server.port)
            assert metrics.folded == await store.head() == value(second, "gormes_log_events")
            assert value(second, "gormes_job_attempts_total") == 0
        finally:
            server.close()
