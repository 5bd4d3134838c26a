"""The store's writer thread: its CPU per event, batch by batch, with no trio.

The writer commits each group-commit batch in a worker thread that shares the
GIL with the trio thread, so its Python time is taken from the appenders and
the runs. This drives the writer's commit of one batch (`SQLiteEventStore`'s
`_commit`, what the writer hands its thread) on batches of BATCH requests built
beforehand, one stream per request, and reads the thread's CPU time around it:

- append: single-event appends with their expected version (`append.py`'s shape);
- transact: transact functions that read the stream's version and append one
  event (an audit record's shape: no SQL of their own);
- transact_read: transact functions that read the stream's recent events of
  one type, by name, then append (a run's inbox read and its receipt);
- inline: `transact` with an inline projection that does nothing (the job
  worker's shape, the projection's own cost left out; since decision 0042 its
  SAVEPOINT is deferred as without one, where before each took a savepoint
  and a flush);
- floor: raw sqlite3 inserting the same rows (executemany) and committing.

All at synchronous=FULL; the fsync waits are not CPU and are not counted.
Prints one JSON line: median microseconds of CPU per event of each shape, and
each shape's ratio to the floor.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import PAYLOAD, RAW_INSERT, RAW_NOTE, median, progress, raw_connection, report, scratch_dir  # noqa: E402

from gormes.events.notes import NoteAdded  # noqa: E402
from gormes.events.sqlite import SQLiteEventStore  # noqa: E402
from gormes.events.sqlite_log import SQLiteLog  # noqa: E402
from gormes.events.sqlite_schema import _SCHEMA  # noqa: E402
from gormes.events.store import AppendRequest  # noqa: E402
from gormes.events.store_base import _Request  # noqa: E402

BATCH = int(os.environ.get("BENCH_BATCH", "1000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "15"))
EVENT = NoteAdded(text=PAYLOAD, author="bench")
OTHER = NoteAdded(text="other", author="bench", tags=("x",))
READ_TYPES = ("note.added",)  # by name, as a run reads its inbox


def _cpu_us_per_event(prepare: Callable[[int], Any], commit: Callable[[Any], int],
                      rounds: int) -> float:
    """Median thread CPU (us) per event of `commit(prepare(round))`; `commit`
    returns its events, and only it is timed (the requests are the callers')."""
    commit(prepare(0))  # warm up: every stream known
    samples = []
    for r in range(1, rounds + 1):
        batch = prepare(r)
        start = time.thread_time()
        events = commit(batch)
        samples.append((time.thread_time() - start) * 1e6 / events)
    return median(samples)


def _store(path: Path) -> SQLiteEventStore:
    # the store's writer commit is driven directly: no trio, so no writer task
    return SQLiteEventStore(SQLiteLog(path, durability="full"))


def _committed(store: SQLiteEventStore, batch: list[_Request]) -> int:
    store._commit(batch)
    for req in batch:
        if req.error is not None:
            raise req.error
    return len(batch)


def bench_append(path: Path, streams: list[str]) -> float:
    store = _store(path)
    try:
        return _cpu_us_per_event(
            lambda r: [_Request("append", [AppendRequest(s, [EVENT], r)]) for s in streams],
            lambda batch: _committed(store, batch), ROUNDS)
    finally:
        store.log.close()


def _transacts(path: Path, streams: list[str], fn: Callable[[Any, str], Any],
               inline: bool = False) -> float:
    store = _store(path)
    if inline:
        store.add_inline(lambda conn, records: None)
    try:
        return _cpu_us_per_event(
            lambda r: [_Request("transact", lambda tx, s=s: fn(tx, s)) for s in streams],
            lambda batch: _committed(store, batch), ROUNDS)
    finally:
        store.log.close()


def _append_checked(tx: Any, stream: str) -> Any:
    return tx.append(stream, [EVENT], expected_version=tx.stream_version(stream))


def _read_then_append(tx: Any, stream: str) -> Any:
    version = tx.stream_version(stream)
    tx.read_stream(stream, max(0, version - 2), READ_TYPES)
    return tx.append(stream, [EVENT], expected_version=version)


def bench_floor(path: Path, streams: list[str]) -> float:
    conn = raw_connection(path, _SCHEMA)
    data, insert = RAW_NOTE, RAW_INSERT

    def commit(r: int) -> int:
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(insert, [(s, r + 1, "note.added", 1, data, now) for s in streams])
        conn.execute("COMMIT")
        return len(streams)

    try:
        return _cpu_us_per_event(lambda r: r, commit, ROUNDS)
    finally:
        conn.close()


def main() -> None:
    shapes: dict[str, Callable[[Path, list[str]], float]] = {
        "floor": bench_floor,
        "append": bench_append,
        "transact": lambda p, s: _transacts(p, s, _append_checked),
        "transact_read": lambda p, s: _transacts(p, s, _read_then_append),
        "inline": lambda p, s: _transacts(p, s, _append_checked, inline=True),
    }
    only = [name for name in sys.argv[1:] if name in shapes] or list(shapes)
    out: dict[str, object] = {"benchmark": "append_writer", "batch": BATCH, "rounds": ROUNDS}
    with scratch_dir() as d:
        for name in only:
            progress(f"append_writer: {name} ...")
            streams = [f"bench-{uuid.uuid4().hex}" for _ in range(BATCH)]
            out[f"{name}_cpu_us"] = round(shapes[name](d / f"{name}.db", streams), 2)
    floor = out.get("floor_cpu_us")
    if isinstance(floor, float) and floor > 0:
        for name in only:
            if name != "floor":
                out[f"{name}_vs_floor"] = round(out[f"{name}_cpu_us"] / floor, 2)  # type: ignore[operator]
    report(out)


if __name__ == "__main__":
    main()
