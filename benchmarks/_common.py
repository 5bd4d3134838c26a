"""Shared bits of the benchmarks: temp databases, medians, the one JSON line."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PAYLOAD = "x" * 120  # rows of ~200 bytes, as in the measured facts


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
