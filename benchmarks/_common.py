"""Shared bits of the benchmarks: temp databases, medians, the one JSON line."""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PAYLOAD = "x" * 120  # rows of ~200 bytes, as in the measured facts

# What the raw sqlite3 comparators insert: the row gormes writes for a NoteAdded.
RAW_NOTE = '{"type":"note.added","text":"%s","author":"bench","tags":[]}' % PAYLOAD
RAW_INSERT = (
    "INSERT INTO events(stream, version, type, type_version, data, recorded_at) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)


def raw_connection(path: Path, schema: str) -> sqlite3.Connection:
    """Raw sqlite3 on gormes' `schema` (events/sqlite_schema.py's), WAL and
    synchronous=FULL as the store: the comparator the writer is measured against."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    for statement in schema.split(";"):
        if statement.strip():
            conn.execute(statement)
    return conn


@contextmanager
def scratch_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="gormes-bench-", dir=os.environ.get("BENCH_DIR")) as d:
        yield Path(d)


def median(values: list[float]) -> float:
    return statistics.median(values)


def report(result: dict[str, object]) -> None:
    print(json.dumps(result, sort_keys=False))
    sys.stdout.flush()


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
