"""What the index of the gateways' refused calls costs and saves (decision 0075).

Reads. A log of SIZE audit records over two days (10,000, then
BENCH_REFUSALS_SIZE, 1,000,000 by default), REFUSED of them refusals of the call
rate in the last day, is read as `gormes doctor` reads it (`call_refusals.refusals`,
the last 24 hours): first with no index, the same SQL then walking the log
(`scan_ms`, the comparator), then the index is made as a `gormes mcp` makes it
(`build_ms`), then the read again (`gormes_ms`). `ratio`: the large log's
median over the small one's (1.0: the read costs the same whatever the log
holds). `capped_ms`: the read when the day holds more refusals than the count
reads (COUNT_CAP + 1,000).

Writes. Two fresh databases, one with the index and one without, written in
turns (each first in half the pairs), medians:
- `sealed_us`: one audit record sealed (`append_sealed`), what every call costs;
- `refusal_us`: the same for a refused call's record, which the index holds;
- `note_us`: per event, appends of 1,000 `note.added` in a transaction (a row
  that is not an audit record: the index tests its `type`).

SQLite with durability `normal` (no fsync per commit), and PostgreSQL when
GORMES_TEST_PG_URL's server (or 127.0.0.1:5432) can be reached
(BENCH_REFUSALS_BACKENDS=sqlite for one). One JSON line per backend.

    BENCH_REFUSALS_SIZE=200000 .venv/bin/python benchmarks/gateway_refusals.py
    .venv/bin/python benchmarks/gateway_refusals.py --quick   # the smoke test's run
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
from _common import PAYLOAD, median, progress, report, scratch_dir  # noqa: E402

from gormes.control import call_refusals  # noqa: E402
from gormes.events.audit import OperationAudited, audit_stream  # noqa: E402
from gormes.events.audit_chain import append_sealed  # noqa: E402
from gormes.events.notes import NoteAdded  # noqa: E402
from gormes.events.scratch_store import scratch_store  # noqa: E402
from gormes.events.store import AppendRequest  # noqa: E402

QUICK = "--quick" in sys.argv  # the smoke test's: small logs, a few pairs, SQLite only
SIZES = (2_000, 4_000) if QUICK else (10_000, int(os.environ.get("BENCH_REFUSALS_SIZE", "1000000")))
REFUSED = 100
SAMPLES = 3 if QUICK else 7
WRITE_PAIRS = 4 if QUICK else int(os.environ.get("BENCH_REFUSALS_PAIRS", "300"))
NOTE_PAIRS = 2 if QUICK else 30
NOW = 1_800_000_000.0
DAY = 86_400.0
PG_URL = os.environ.get("GORMES_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
REFUSAL = ("CallRateLimited: 'gateway' callers may make at most 600 calls a minute between them"
           " (GORMES_GATEWAY_RATE=600rpm); retry in 12s")


class Clock:
    def __init__(self) -> None:
        self.now = NOW - 2 * DAY

    def __call__(self) -> float:
        return self.now


def record(at: float, refused: bool) -> OperationAudited:
    return OperationAudited(
        operation="time.now", audit_kind="time", caller="mcp:bench", trust="gateway", allowed=not refused,
        outcome="denied" if refused else "ok", error=REFUSAL if refused else None, duration_ms=0.2,
        input_sha256="0" * 64, at=int(at * 1000))


async def fill(store: Any, clock: Clock, size: int, refused: int) -> None:
    """`size` audit records over the two days before NOW, `refused` of them
    refusals spread over the last day; written unsealed, 5,000 a transaction."""
    every = max(1, (size // 2) // max(1, refused))
    batch: list[OperationAudited] = []
    made = 0
    for n in range(size):
        clock.now = NOW - 2 * DAY + n * (2 * DAY / size)
        late = n >= size // 2
        is_refusal = late and made < refused and (n - size // 2) % every == 0
        made += is_refusal
        batch.append(record(clock.now, is_refusal))
        if len(batch) == 5000 or n == size - 1:
            await store.append(audit_stream(int(clock.now * 1000)), batch)
            batch = []
    clock.now = NOW


def opened(backend: str, where: Path, clock: Clock) -> Any:
    """A scratch store of `backend`: the SQLite file `where`, or a PostgreSQL schema dropped after."""
    return scratch_store(where if backend == "sqlite" else PG_URL, "gormes_bench", clock=clock)


async def settle(store: Any, backend: str) -> None:
    """The state a database is read in after a while, not right after a bulk write:
    statistics on PostgreSQL (autovacuum's ANALYZE); on SQLite the WAL checkpointed
    into the file (a WAL of a million records' pages slows every read's page lookups,
    whatever it reads)."""
    if backend == "postgres":
        await store.transact(lambda tx: tx.execute("ANALYZE events"))
    else:
        await store.read_sql(lambda conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())


def read_without_index(conn: Any, since: float) -> int:
    """The comparator: the SQL of the count, which with no index walks the log."""
    dialect = getattr(conn, "dialect", "sqlite")
    return int(conn.execute(call_refusals.counting_sql(dialect), (since, call_refusals.COUNT_CAP + 1)).fetchone()[0])


async def timed(store: Any, read: Callable[[Any], Any]) -> tuple[float, Any]:
    times, found = [], None
    for _ in range(SAMPLES):
        start = time.perf_counter()
        found = await store.read_sql(read)
        times.append(time.perf_counter() - start)
    return median(times), found


async def reads(backend: str, d: Path) -> dict[str, Any]:
    out: dict[str, dict[str, float]] = {k: {} for k in ("scan_ms", "build_ms", "gormes_ms")}
    since = NOW - DAY
    for size in SIZES:
        progress(f"gateway_refusals {backend}: writing {size:,} audit records ...")
        clock = Clock()
        async with opened(backend, d / f"reads-{size}.db", clock) as store:
            await fill(store, clock, size, REFUSED)
            await settle(store, backend)
            out["scan_ms"][str(size)], scanned = await timed(store, lambda c: read_without_index(c, since))
            start = time.perf_counter()
            await store.transact(call_refusals.create_index)
            out["build_ms"][str(size)] = time.perf_counter() - start
            await settle(store, backend)
            out["gormes_ms"][str(size)], found = await timed(store, lambda c: call_refusals.refusals(c, since))
            assert found.count == scanned == REFUSED, (found, scanned)
    capped_clock = Clock()
    async with opened(backend, d / "capped.db", capped_clock) as store:
        progress(f"gateway_refusals {backend}: a day of more refusals than the count reads ...")
        await fill(store, capped_clock, 2 * (call_refusals.COUNT_CAP + 1000), call_refusals.COUNT_CAP + 1000)
        await store.transact(call_refusals.create_index)
        await settle(store, backend)
        capped_ms, found = await timed(store, lambda c: call_refusals.refusals(c, since))
        assert found.more and found.count == call_refusals.COUNT_CAP, found
    small, large = (str(s) for s in SIZES)

    def ms(name: str) -> dict[str, float]:
        return {k: round(v * 1000, 3) for k, v in out[name].items()}

    return {"gormes_ms": ms("gormes_ms"), "scan_ms": ms("scan_ms"), "build_ms": ms("build_ms"),
            "ratio": round(out["gormes_ms"][large] / out["gormes_ms"][small], 2),
            "scan_ratio": round(out["scan_ms"][large] / out["scan_ms"][small], 2),
            "capped_ms": round(capped_ms * 1000, 3)}


async def writes(backend: str, d: Path) -> dict[str, Any]:
    progress(f"gateway_refusals {backend}: writes, {WRITE_PAIRS} pairs ...")
    clocks = (Clock(), Clock())
    async with opened(backend, d / "with.db", clocks[0]) as indexed, \
            opened(backend, d / "without.db", clocks[1]) as plain:
        await indexed.transact(call_refusals.create_index)
        stores = {"with": indexed, "without": plain}
        samples: dict[str, dict[str, list[float]]] = {k: {"with": [], "without": []}
                                                       for k in ("sealed_us", "refusal_us", "note_us")}

        async def sealed(store: Any, refused: bool) -> float:
            request = AppendRequest(audit_stream(int(NOW * 1000)), [record(NOW, refused)])
            start = time.perf_counter()
            await append_sealed(store, request)
            return (time.perf_counter() - start) * 1e6

        notes = [NoteAdded(text=PAYLOAD) for _ in range(1000)]

        async def appended(store: Any, n: int) -> float:
            start = time.perf_counter()
            await store.append(f"notes-{n}", notes)
            return (time.perf_counter() - start) * 1e6 / len(notes)

        for name in stores:  # warm: the first sealed append reads the chain's head
            await sealed(stores[name], False)
        for i in range(WRITE_PAIRS):
            order = ("with", "without") if i % 2 == 0 else ("without", "with")
            for name in order:
                samples["sealed_us"][name].append(await sealed(stores[name], False))
            for name in order:
                samples["refusal_us"][name].append(await sealed(stores[name], True))
            if i < NOTE_PAIRS:
                for name in order:
                    samples["note_us"][name].append(await appended(stores[name], i))
    return {kind: {name: round(median(values), 2) for name, values in by.items()} for kind, by in samples.items()}


def postgres_reachable() -> bool:
    try:
        import psycopg

        psycopg.connect(PG_URL, connect_timeout=3).close()
    except Exception:  # noqa: BLE001 - no server: the backend is left out
        return False
    return True


def measured_backends(quick: bool) -> list[str]:
    """SQLite, and PostgreSQL when the server answers (not in a quick run), narrowed
    by BENCH_REFUSALS_BACKENDS (a comma-separated list) when it is set."""
    backends = ["sqlite"] + (["postgres"] if not quick and postgres_reachable() else [])
    only = os.environ.get("BENCH_REFUSALS_BACKENDS")
    return [b for b in backends if b in only.split(",")] if only else backends


async def main() -> None:
    backends = measured_backends(QUICK)
    with scratch_dir() as d:
        for backend in backends:
            result: dict[str, Any] = {"benchmark": "gateway_refusals", "backend": backend,
                                      "audit_records": list(SIZES), "refused": REFUSED, "samples": SAMPLES}
            result.update(await reads(backend, d))
            result["writes"] = await writes(backend, d)
            result["write_pairs"] = WRITE_PAIRS
            report(result)


if __name__ == "__main__":
    trio.run(main)
