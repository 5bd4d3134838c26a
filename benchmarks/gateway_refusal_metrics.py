"""What a `/metrics` scrape costs with a log full of the gateways' refused calls (decision 0079).

Two logs of SIZE audit records over two days (BENCH_REFUSAL_METRICS_SIZE,
1,000,000 by default), both with the index of the refusals (`events_call_refused`,
as the first limited call of a `gormes mcp` makes it): `few` holds FEW refusals,
`many` holds SIZE / 2 (half the log: a flood's). A `LogMetrics` is begun on each
(`prepare`, as the daemon starts: the refusals before it are not its to count),
scraped once (the first scrape, whose other counters fold the whole log; timed,
`first_scrape_ms`), then:

- `scrape_ms`: a scrape (`LogMetrics.snapshot`: the ledger, the fold of the log's
  new rows, the refusals' counter) with nothing recorded since the last;
- `refusals_ms`: the refusals' counter's part of it alone (`RefusalCount.fold`);
- `new_ms`: a scrape after NEW refusals were recorded since the last (the
  counter counts them: what the scrape returns);
- `count_all_ms`, the comparator: the count a counter begun with the log would
  read, every refusal's index entry (on `many`: SIZE / 2 of them).

And the doctor's reads on `many`, whose last day holds SIZE / 2 refusals, more
than it counts: `doctor_ms.refusals` (`call_refusals.refusals`, the count to
COUNT_CAP, the first and the latest) and `doctor_ms.callers`
(`refused_callers`, the clients of the latest COUNT_CAP), medians of SAMPLES.

`ratio`: `many` over `few` (1.0: the scrape costs the same whatever the log
holds), of the scrape, and `refusals_ratio` of the counter's part;
`comparator_ratio`: `count_all_ms` over the counter's part on `many`. Samples
alternate between the logs (each first in half the pairs), medians of SAMPLES.
SQLite with durability `normal`, and PostgreSQL when GORMES_TEST_PG_URL's server
(or 127.0.0.1:5432) can be reached (BENCH_REFUSALS_BACKENDS=sqlite for one). One
JSON line per backend.

    BENCH_REFUSAL_METRICS_SIZE=200000 .venv/bin/python benchmarks/gateway_refusal_metrics.py
    .venv/bin/python benchmarks/gateway_refusal_metrics.py --quick   # the smoke test's run
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
from _common import median, progress, report, scratch_dir  # noqa: E402
from gateway_refusals import DAY, NOW, Clock, fill, measured_backends, opened, record, settle  # noqa: E402

from gormes.actors.jobs.queue import JobQueue  # noqa: E402
from gormes.control import call_refusals  # noqa: E402
from gormes.events.audit import audit_stream  # noqa: E402
from gormes.events.postgres_sql import POSTGRES, SQLITE  # noqa: E402
from gormes.telemetry.metrics import LogMetrics  # noqa: E402

QUICK = "--quick" in sys.argv  # the smoke test's: small logs, a few samples, SQLite only
SIZE = 4_000 if QUICK else int(os.environ.get("BENCH_REFUSAL_METRICS_SIZE", "1000000"))
FEW = 100
NEW = 100 if QUICK else 1_000
SAMPLES = 3 if QUICK else 7
LOGS = ("few", "many")


def count_all(conn: Any) -> int:
    """The comparator: every refusal the index holds, as a counter begun with the log would count them."""
    dialect = POSTGRES if getattr(conn, "dialect", SQLITE) == POSTGRES else SQLITE
    return int(conn.execute(f"SELECT count(*) FROM events WHERE {call_refusals.refused_where(dialect)}"
                            " AND recorded_at > ?", (0.0,)).fetchone()[0])


async def timed(run: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    found = await run()
    return (time.perf_counter() - start) * 1000, found


async def refuse(store: Any, clock: Clock, n: int) -> None:
    """`n` refusals' records, as a flood leaves them, a millisecond apart (not timed)."""
    records = []
    for _ in range(n):
        clock.now += 0.001
        records.append(record(clock.now, True))
    await store.append(audit_stream(int(clock.now * 1000)), records)


async def measure(backend: str, d: Path) -> dict[str, Any]:
    clocks = {name: Clock() for name in LOGS}
    async with opened(backend, d / "few.db", clocks["few"]) as few, \
            opened(backend, d / "many.db", clocks["many"]) as many:
        stores = {"few": few, "many": many}
        for name, store in stores.items():
            refused = FEW if name == "few" else SIZE // 2
            progress(f"gateway_refusal_metrics {backend}: {name}: {SIZE:,} audit records, {refused:,} refused ...")
            await fill(store, clocks[name], SIZE, refused)
            await store.transact(call_refusals.create_index)
            await JobQueue.open(store)
            await settle(store, backend)
        metrics = {name: LogMetrics(store) for name, store in stores.items()}
        first: dict[str, float] = {}
        for name in LOGS:
            await metrics[name].prepare()
            first[name], snap = await timed(metrics[name].snapshot)
            assert snap.gateway_refusals == 0, snap.gateway_refusals
        await settle(stores["few"], backend)
        await settle(stores["many"], backend)
        samples: dict[str, dict[str, list[float]]] = {k: {n: [] for n in LOGS}
                                                       for k in ("scrape_ms", "refusals_ms", "new_ms")}
        counted = dict.fromkeys(LOGS, 0)
        for i in range(SAMPLES):
            order = LOGS if i % 2 == 0 else LOGS[::-1]
            for name in order:
                samples["scrape_ms"][name].append((await timed(metrics[name].snapshot))[0])
            for name in order:
                samples["refusals_ms"][name].append(
                    (await timed(lambda: metrics[name]._refusals.fold(stores[name])))[0])
            for name in order:
                await refuse(stores[name], clocks[name], NEW)
                elapsed, snap = await timed(metrics[name].snapshot)
                counted[name] += NEW
                assert snap.gateway_refusals == counted[name], (snap.gateway_refusals, counted[name])
                samples["new_ms"][name].append(elapsed)
        all_ms = []
        for _ in range(SAMPLES):
            elapsed, found = await timed(lambda: stores["many"].read_sql(count_all))
            all_ms.append(elapsed)
        assert found == SIZE // 2 + counted["many"], found
        since = NOW - DAY
        doctor: dict[str, list[float]] = {"refusals": [], "callers": []}
        for _ in range(SAMPLES):
            elapsed, seen = await timed(lambda: stores["many"].read_sql(lambda c: call_refusals.refusals(c, since)))
            assert seen.more == (SIZE // 2 + counted["many"] > call_refusals.COUNT_CAP), seen
            doctor["refusals"].append(elapsed)
            elapsed, callers = await timed(
                lambda: stores["many"].read_sql(lambda c: call_refusals.refused_callers(c, since)))
            assert callers.read == seen.count, callers
            doctor["callers"].append(elapsed)
    result: dict[str, Any] = {k: {n: round(median(v), 3) for n, v in by.items()} for k, by in samples.items()}
    result["first_scrape_ms"] = {n: round(v, 3) for n, v in first.items()}
    result["count_all_ms"] = round(median(all_ms), 3)
    result["doctor_ms"] = {k: round(median(v), 3) for k, v in doctor.items()}
    result["ratio"] = round(median(samples["scrape_ms"]["many"]) / median(samples["scrape_ms"]["few"]), 2)
    result["refusals_ratio"] = round(median(samples["refusals_ms"]["many"]) / median(samples["refusals_ms"]["few"]),
                                     2)
    result["comparator_ratio"] = round(median(all_ms) / median(samples["refusals_ms"]["many"]), 2)
    return result


async def main() -> None:
    backends = measured_backends(QUICK)
    with scratch_dir() as d:
        for backend in backends:
            result: dict[str, Any] = {"benchmark": "gateway_refusal_metrics", "backend": backend,
                                      "audit_records": SIZE, "refused": {"few": FEW, "many": SIZE // 2},
                                      "new": NEW, "samples": SAMPLES}
            result.update(await measure(backend, d))
            report(result)


if __name__ == "__main__":
    trio.run(main)
