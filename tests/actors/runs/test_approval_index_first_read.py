"""A database no write of the approval book has indexed (an older gormes wrote
it, or only runs and `gormes append` did): the first read of its approvals on a
store that may write builds the approvals index, so the reads after it (each
`gormes top` refresh, each listing) cost what they return instead of the whole
stream (decision 0057's update). A read-only store reads it by folding the whole
stream, as before, and writes nothing. Every read agrees with the whole stream's
fold, the oracle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from approval_helpers import (
    NOW, assert_reads_agree, counting_reads, database, open_on, request, whole_stream_fold,
)

from gormes.actors.runs.approval_book import read_approval, read_approvals
from gormes.dashboard.control import ControlWatch
from gormes.events.approvals import APPROVALS_STREAM, ApprovalDecided
from gormes.events.sqlite import SQLiteEventStore
from gormes.projections import approval_index
from gormes.projections.bookkeeping import has_table
from gormes.providers.pricing import PricingTable

BACKENDS = ["sqlite", "postgres"]
PENDING = ["p1", "p2"]


async def _unindexed_log(store: Any, decided: int) -> None:
    """`decided` denied approvals, then two pending ones, appended as a run or
    `gormes append` appends them: no write of the book, so nothing is indexed."""
    events: list = []
    for i in range(decided):
        events += [request(f"old-{i}"), ApprovalDecided(approval_id=f"old-{i}", decision="denied",
                                                        by="operator:cli", at=NOW)]
    events += [request(i) for i in PENDING]
    for start in range(0, len(events), 1000):
        await store.append(APPROVALS_STREAM, events[start:start + 1000])


async def _listing(store: Any) -> Any:
    return list(await read_approvals(store, status="pending"))


async def _one(store: Any) -> Any:
    approval = await read_approval(store, "p1")
    return approval.request.approval_id, approval.status


def _panel() -> Callable[[Any], Awaitable[Any]]:
    """`gormes top`'s panel: one watch for the life of the view, as its app keeps."""
    watch: list[ControlWatch] = []

    async def read(store: Any) -> Any:
        if not watch:
            watch.append(ControlWatch(store))
        approvals, _ = await watch[0].read(now=NOW / 1000, pricing=PricingTable({}))
        return [row.id for row in approvals]

    return read


Reader = Callable[[Any], Awaitable[Any]]


async def _second_read_work(path: Path, decided: int, reader: Callable[[], Reader]) -> tuple[int, Any]:
    """SQLite VM instructions of the second read (the first may build the index)."""
    read = reader()
    async with SQLiteEventStore.open(path) as store:
        await _unindexed_log(store, decided)
        first = await read(store)
        with counting_reads(store) as steps:
            assert await read(store) == first
    return steps[0], first


@pytest.mark.parametrize("reader", [lambda: _listing, lambda: _one, _panel], ids=["listing", "by-id", "top-panel"])
async def test_reads_stop_folding_the_whole_stream_after_the_first(tmp_path, reader):
    small, got = await _second_read_work(tmp_path / "small.db", 10, reader)
    large, same = await _second_read_work(tmp_path / "large.db", 2_000, reader)
    assert got == same
    assert large == small


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_first_read_on_a_writable_store_builds_the_index(tmp_path, backend):
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            await _unindexed_log(store, 30)
            assert not await store.read_sql(lambda conn: has_table(conn, approval_index.TABLE))
            await assert_reads_agree(store, ["old-0", "old-29", *PENDING])
            built = await store.read_sql(
                lambda conn: has_table(conn, approval_index.TABLE) and not approval_index.lags(conn))
            assert built


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_read_only_store_folds_the_whole_stream_and_writes_nothing(tmp_path, backend):
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            await _unindexed_log(store, 30)
            oracle = await whole_stream_fold(store)
            head = await store.head()
        async with open_on(backend, where, readonly=True) as store:
            assert await assert_reads_agree(store, ["old-0", "old-29", *PENDING]) == oracle
            assert await _panel()(store) == PENDING
        async with open_on(backend, where) as store:
            assert await store.head() == head
            assert not await store.read_sql(lambda conn: has_table(conn, approval_index.TABLE))
