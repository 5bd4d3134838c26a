"""Deciding one approval beside 100 and beside 20,000 others (decision 0057).

Each log holds that many approvals on the stream `approvals` (every other one
decided and claimed), written as gormes writes them. Each sample appends one new
request (as a run does, not indexed) and times the transaction that decides it:

- gormes: `decide_in`, which catches the approvals index up (the one new request)
  and reads that approval's events through it;
- fold: the same decision made as the code before 0057 made it, folding the whole
  `approvals` stream in the transaction (the comparator, in the same run on the
  same files).

`build_ms`: the first decision on each log, which builds the index (a log an
older gormes wrote: every event of the stream indexed once).

Durability `normal` (no fsync per commit): the figure is the transaction's work,
not the disk's. Prints one JSON line; figures are medians of SAMPLES decisions,
and `ratio` is the median at 20,000 over the median at 100 (1.0: the decision
costs the same whatever the log holds).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
from _common import median, progress, report, scratch_dir  # noqa: E402

from gormes.actors.runs.approval_book import decide_in  # noqa: E402
from gormes.events.approvals import (  # noqa: E402
    APPROVALS_STREAM, ApprovalDecided, ApprovalRequested, ApprovalUsed, fold_approvals,
)
from gormes.events.sqlite import SQLiteEventStore  # noqa: E402

SIZES = (100, 20_000)
SAMPLES = 30
NOW = 1_700_000_000_000


def request(approval_id: str) -> ApprovalRequested:
    return ApprovalRequested(
        approval_id=approval_id, operation="shell.run", arguments='{"command": "ls"}', args_hash="h",
        run_id="01RUN", caller="run-01RUN", trust="child-agent", why="deployment rule 'shell.*'", at=NOW,
    )


def fold_decide(tx: Any, approval_id: str) -> None:
    """The decision as made before the index: the whole stream read and folded."""
    approvals = fold_approvals([(r.position, r.event) for r in tx.read_stream(APPROVALS_STREAM)])
    if approvals[approval_id].decision is not None:
        raise RuntimeError("not pending")
    tx.append(APPROVALS_STREAM, [ApprovalDecided(approval_id=approval_id, decision="approved", by="bench", at=NOW)])


def index_decide(tx: Any, approval_id: str) -> None:
    decide_in(tx, NOW, approval_id, "approved", by="bench")


async def fill(store: SQLiteEventStore, approvals: int) -> None:
    events: list[Any] = []
    for i in range(approvals):
        events.append(request(f"old-{i}"))
        if i % 2:
            events.append(ApprovalDecided(approval_id=f"old-{i}", decision="denied", by="bench", at=NOW))
            events.append(ApprovalUsed(approval_id=f"old-{i}", run_id="01RUN", at=NOW))
    for start in range(0, len(events), 5000):
        await store.append(APPROVALS_STREAM, events[start:start + 5000])


async def build(path: Path, approvals: int) -> float:
    """Write the log, then time the first decision (which builds the index)."""
    async with SQLiteEventStore.open(path, durability="normal") as store:
        await fill(store, approvals)
        start = time.perf_counter()
        await store.transact(lambda tx: index_decide(tx, "old-0"))
        return time.perf_counter() - start


async def decide_times(path: Path, decide: Callable[[Any, str], None], tag: str) -> list[float]:
    async with SQLiteEventStore.open(path, durability="normal") as store:
        times = []
        for i in range(SAMPLES):
            approval_id = f"{tag}-{i}"
            await store.append(APPROVALS_STREAM, [request(approval_id)])
            start = time.perf_counter()
            await store.transact(lambda tx: decide(tx, approval_id))  # noqa: B023 - awaited here
            times.append(time.perf_counter() - start)
    return times


async def main() -> None:
    results: dict[str, dict[int, float]] = {"gormes": {}, "fold": {}, "build": {}}
    with scratch_dir() as d:
        for size in SIZES:
            path = d / f"approvals-{size}.db"
            progress(f"approvals: deciding one beside {size} ...")
            results["build"][size] = await build(path, size)
            for measured in (False, True):  # a round to warm the caches first
                for name, decide in (("gormes", index_decide), ("fold", fold_decide)):
                    times = await decide_times(path, decide, f"{name}-{measured}")
                    if measured:
                        results[name][size] = median(times)
    small, large = SIZES
    report({
        "benchmark": "approvals",
        "gormes_decide_ms": {str(n): round(results["gormes"][n] * 1000, 3) for n in SIZES},
        "fold_decide_ms": {str(n): round(results["fold"][n] * 1000, 3) for n in SIZES},
        "ratio": round(results["gormes"][large] / results["gormes"][small], 2),
        "fold_ratio": round(results["fold"][large] / results["fold"][small], 2),
        "build_ms": {str(n): round(results["build"][n] * 1000, 1) for n in SIZES},
        "samples": SAMPLES,
    })


if __name__ == "__main__":
    trio.run(main)
