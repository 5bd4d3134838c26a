"""Read throughput: the whole log as typed events, and a projection rebuild.

- gormes_read_eps: `SQLiteLog.read_all` over the whole log in pages of 5,000,
  every row decoded into a typed event inside a `Recorded`;
- raw_read_eps: raw sqlite3 fetching the same rows with the same paged query;
- rebuild_eps: the `streams` projection dropped and rebuilt from position 0 by
  the projection runner (reading, decoding, applying, tracking, committing).
Prints one JSON line; figures are medians of three runs.
"""

from __future__ import annotations

import sqlite3
import sys
import time
import uuid
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
from _common import PAYLOAD, median, progress, report, scratch_dir  # noqa: E402

from gormes.events.notes import NoteAdded  # noqa: E402
from gormes.events.sqlite_log import SQLiteLog, WriteBatch  # noqa: E402
from gormes.events.store import AppendRequest  # noqa: E402

EVENTS = 100_000
STREAMS = 1_000
PAGE = 5_000
RUNS = 3


def fill(path: Path) -> None:
    log = SQLiteLog(path, durability="normal")
    streams = [f"bench-{uuid.uuid4().hex}" for _ in range(STREAMS)]
    event = NoteAdded(text=PAYLOAD, author="bench")
    for start in range(0, EVENTS, 10_000):
        log.begin()
        batch = WriteBatch(log)
        for i in range(start, start + 10_000):
            batch.append([AppendRequest(streams[i % STREAMS], [event])])
        batch.finish()
        log.commit(batch.versions)
    log.close()


def read_gormes(path: Path) -> float:
    log = SQLiteLog(path)
    start = time.perf_counter()
    position, count = 0, 0
    while True:
        page = log.read_all(position, PAGE)
        if not page:
            break
        count += len(page)
        position = page[-1].position
    elapsed = time.perf_counter() - start
    log.close()
    assert count == EVENTS
    return count / elapsed


def read_raw(path: Path) -> float:
    conn = sqlite3.connect(path)
    start = time.perf_counter()
    position, count = 0, 0
    while True:
        rows = conn.execute(
            "SELECT position, stream, version, type, type_version, data, recorded_at "
            "FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (position, PAGE),
        ).fetchall()
        if not rows:
            break
        count += len(rows)
        position = rows[-1][0]
    elapsed = time.perf_counter() - start
    conn.close()
    assert count == EVENTS
    return count / elapsed


def rebuild(path: Path) -> float:
    from gormes.events.sqlite import SQLiteEventStore
    from gormes.projections.runner import ProjectionRunner
    from gormes.projections.streams import StreamsProjection

    async def main() -> float:
        async with SQLiteEventStore.open(path) as store:
            runner = ProjectionRunner(store, StreamsProjection())
            start = time.perf_counter()
            position = await runner.rebuild()
            elapsed = time.perf_counter() - start
            assert position == EVENTS
            return EVENTS / elapsed

    return trio.run(main)


def main() -> None:
    with scratch_dir() as d:
        path = d / "read.db"
        progress(f"read: writing {EVENTS} events ...")
        fill(path)
        read_gormes(path)  # warm the page cache
        progress("read: gormes / raw sqlite3 ...")
        gormes_eps = median([read_gormes(path) for _ in range(RUNS)])
        raw_eps = median([read_raw(path) for _ in range(RUNS)])
        progress("read: projection rebuild ...")
        rebuild_eps = median([rebuild(path) for _ in range(RUNS)])
    report(
        {
            "benchmark": "read",
            "gormes_read_eps": round(gormes_eps),
            "raw_read_eps": round(raw_eps),
            "rebuild_eps": round(rebuild_eps),
            "vs_raw": round(gormes_eps / raw_eps, 3),
            "events": EVENTS,
        }
    )


if __name__ == "__main__":
    main()
