"""The ceiling of `append.py` for any store whose appenders are trio tasks.

The least group commit there can be, with none of gormes in it: 1,000 trio tasks,
each appending one row at a time and parking until its row is durable; a writer
task hands the queued rows to a worker thread, which inserts them (executemany)
and commits (one fsync), then reschedules every caller. No version check, no
encoding, no positions, no results, no error handling. Its figure is what
`append.py`'s trio side costs at the least, on this machine, next to the same two
comparators run in the same process, on the same rows and table shape: raw
sqlite3 at 1,000 rows per commit and eventsourcing's SQLite recorder.

`append.py`'s targets (0.5 of raw, 20x eventsourcing) cannot be met by a store
whose appenders are trio tasks if this floor does not meet them; gormes' store
adds its checks and bookkeeping on top. Prints one JSON line; figures are medians.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path

import outcome
import trio
from trio.lowlevel import Abort, current_task, reschedule, wait_task_rescheduled

sys.path.insert(0, str(Path(__file__).parent))
from _common import PAYLOAD, median  # noqa: E402
from append import STREAMS, lockstep_samples, report_against_comparators  # noqa: E402

from gormes.events.sqlite_schema import _SCHEMA  # noqa: E402

DATA = '{"type":"note.added","text":"%s","author":"bench","tags":[]}' % PAYLOAD
INSERT = (
    "INSERT INTO events(stream, version, type, type_version, data, recorded_at) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)


def bench_floor(path: Path) -> float:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)

    def commit(batch: list[tuple[str, int, object]]) -> None:
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(INSERT, [(stream, version, "note.added", 1, DATA, now) for stream, version, _ in batch])
        conn.execute("COMMIT")

    async def main() -> list[float]:
        queued: list[tuple[str, int, object]] = []
        work = trio.Event()

        async def append(i: int, version: int) -> None:
            queued.append((STREAMS[i], version + 1, current_task()))
            if len(queued) == 1:
                work.set()
            await wait_task_rescheduled(lambda _: Abort.FAILED)

        async def writer() -> None:
            nonlocal work, queued
            while True:
                await work.wait()
                work = trio.Event()
                batch, queued = queued, []
                await trio.to_thread.run_sync(commit, batch)
                for _, _, task in batch:
                    reschedule(task, outcome.Value(None))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            rates = await lockstep_samples(append)
            nursery.cancel_scope.cancel()
        return rates

    try:
        return median(trio.run(main))
    finally:
        conn.close()


def main() -> None:
    report_against_comparators("append_floor", "floor", bench_floor, {})


if __name__ == "__main__":
    main()
