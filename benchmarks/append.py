"""Durable append throughput: gormes against raw sqlite3 and eventsourcing.

- gormes: 1,000 concurrent appenders, one per stream (random ids), each appending
  single events with its expected version and waiting for its own durable commit
  (group commit shares the fsyncs); every round adds one event to every stream;
- raw sqlite3: the same rows (same streams, same versions, same JSON) into the
  same table shape, 1,000 rows per commit; timed like gormes, three rounds (three
  commits) per sample;
- eventsourcing: its SQLite recorder saving one event per call.
All three use WAL and synchronous=FULL. Prints one JSON line; figures are medians.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
from _common import PAYLOAD, RAW_INSERT, RAW_NOTE, median, progress, raw_connection, report, scratch_dir  # noqa: E402

from gormes.events.notes import NoteAdded  # noqa: E402
from gormes.events.sqlite import SQLiteEventStore  # noqa: E402
from gormes.events.sqlite_schema import _SCHEMA  # noqa: E402

APPENDERS = 1000
ROUNDS = 5


STREAMS = [f"bench-{uuid.uuid4().hex}" for _ in range(APPENDERS)]


async def lockstep_rate(append: Callable[[int, int], Awaitable[object]], first_version: int,
                        rounds: int) -> float:
    """Appends/s of APPENDERS trio tasks that start together, task i calling
    `append(i, expected_version)` `rounds` times, one at a time."""
    go = trio.Event()
    ready = 0

    async def appender(i: int) -> None:
        nonlocal ready
        ready += 1
        await go.wait()
        for r in range(rounds):
            await append(i, first_version + r)

    async with trio.open_nursery() as nursery:
        for i in range(APPENDERS):
            nursery.start_soon(appender, i)
        while ready < APPENDERS:
            await trio.sleep(0)
        start = time.perf_counter()
        go.set()
    return APPENDERS * rounds / (time.perf_counter() - start)


async def lockstep_samples(append: Callable[[int, int], Awaitable[object]]) -> list[float]:
    """One warm-up round, then ROUNDS samples of three appends per appender."""
    await lockstep_rate(append, 0, 1)
    return [await lockstep_rate(append, 1 + r * 3, 3) for r in range(ROUNDS)]


def bench_gormes(path: Path) -> float:
    """All appenders start together and each appends ROUNDS events, one at a time."""
    event = NoteAdded(text=PAYLOAD, author="bench")

    async def main() -> list[float]:
        async with SQLiteEventStore.open(path) as store:
            return await lockstep_samples(
                lambda i, version: store.append(STREAMS[i], [event], expected_version=version))

    return median(trio.run(main))


def bench_raw(path: Path) -> float:
    conn = raw_connection(path, _SCHEMA)
    data, insert = RAW_NOTE, RAW_INSERT

    def commit(version: int) -> None:
        rows = [(STREAMS[i], version, "note.added", 1, data, time.time()) for i in range(APPENDERS)]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(insert, rows)
        conn.execute("COMMIT")

    commit(1)  # warm up, as gormes' first round
    rates = []
    # Timed as gormes is: each sample is three rounds of 1,000 rows (three commits),
    # so a WAL checkpoint falling in a sample counts on both sides alike.
    for r in range(ROUNDS):
        start = time.perf_counter()
        for k in range(3):
            commit(2 + r * 3 + k)
        rates.append(APPENDERS * 3 / (time.perf_counter() - start))
    conn.close()
    return median(rates)


def bench_eventsourcing(path: Path, count: int = 1000) -> float:
    from eventsourcing.persistence import StoredEvent
    from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

    datastore = SQLiteDatastore(str(path))
    recorder = SQLiteApplicationRecorder(datastore)
    recorder.create_table()
    state = ('{"text":"%s","author":"bench"}' % PAYLOAD).encode()
    events = [
        StoredEvent(originator_id=uuid.uuid4(), originator_version=1, topic="note.added", state=state)
        for _ in range(count)
    ]
    recorder.insert_events([events[0]])  # warm up
    start = time.perf_counter()
    for event in events[1:]:
        recorder.insert_events([event])
    rate = (count - 1) / (time.perf_counter() - start)
    datastore.close()
    return rate


def report_against_comparators(benchmark: str, label: str, measure: Callable[[Path], float],
                               extra: dict[str, object]) -> None:
    """Measure `measure` (events/s) and both comparators in one run; print the JSON
    line with `<label>_eps`, the comparators' and the two ratios."""
    prefix = "" if label == "gormes" else f"{label}_"
    with scratch_dir() as d:
        progress(f"{benchmark}: {label} ...")
        ours = measure(d / f"{label}.db")
        progress(f"{benchmark}: raw sqlite3 ...")
        raw_eps = bench_raw(d / "raw.db")
        progress(f"{benchmark}: eventsourcing ...")
        es_eps = bench_eventsourcing(d / "es.db")
    report(
        {
            "benchmark": benchmark,
            f"{label}_eps": round(ours),
            "raw_sqlite_eps": round(raw_eps),
            "eventsourcing_eps": round(es_eps),
            f"{prefix}vs_raw": round(ours / raw_eps, 3),
            f"{prefix}vs_eventsourcing": round(ours / es_eps, 1),
            "appenders": APPENDERS,
            "rounds": ROUNDS,
            **extra,
            "durability": "full",
        }
    )


def main() -> None:
    report_against_comparators("append", "gormes", bench_gormes, {"appends_per_appender_per_round": 3})


if __name__ == "__main__":
    main()
