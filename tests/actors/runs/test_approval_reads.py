"""Reading one approval costs what it returns (decision 0057): deciding, claiming
or checking one approval reads that approval's events, not the `approvals`
stream, however many approvals the log holds; listing the pending ones reads the
pending ones. Exactly one decision stands when deciders race, on both stores. A
database written before the index (every approval only on the stream) is still
read, decided, claimed and listed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from approval_helpers import NOW, counting, database, open_on, request

from gormes.actors.runs.approval_book import (
    ApprovalNotPending, claim_in, decide_in, decision_in, expire_due, read_approval, read_approvals,
)
from gormes.events.approvals import APPROVALS_STREAM, ApprovalDecided, ApprovalUsed
from gormes.events.sqlite import SQLiteEventStore
from gormes.projections.approval_index import approvals_on

BACKENDS = ["sqlite", "postgres"]


async def _log_of(store, approvals: int) -> None:
    """`approvals` requests on the stream, every other one decided and claimed, as
    the current writers append them (no index is touched)."""
    events: list = []
    for i in range(approvals):
        events.append(request(f"other-{i}"))
        if i % 2:
            events.append(ApprovalDecided(approval_id=f"other-{i}", decision="approved", by="operator:cli", at=NOW))
            events.append(ApprovalUsed(approval_id=f"other-{i}", run_id=f"run-{i}", at=NOW))
    for start in range(0, len(events), 1000):
        await store.append(APPROVALS_STREAM, events[start:start + 1000])


async def _work_of_one_approval(path: Path, others: int) -> list[int]:
    """SQLite VM steps of deciding, claiming and checking one approval, each in a
    transaction of its own, in a log of `others` other approvals."""
    async with SQLiteEventStore.open(path) as store:
        await _log_of(store, others)
        await store.transact(lambda tx: decide_in(tx, NOW, "other-0", "denied", by="operator:cli"))
        await store.append(APPROVALS_STREAM, [request("mine")])
        work = []
        for op in (lambda tx: decide_in(tx, NOW, "mine", "approved", by="operator:cli"),
                   lambda tx: claim_in(tx, NOW, "mine", "run-mine"),
                   lambda tx: decision_in(tx, NOW, "mine")):
            with counting(store.log.conn) as steps:
                await store.transact(op)
            work.append(steps[0])
        assert (await read_approval(store, "mine")).used_by == "run-mine"
    return work


async def test_deciding_claiming_and_checking_one_approval_cost_the_same_in_a_log_200_times_larger(tmp_path):
    small = await _work_of_one_approval(tmp_path / "small.db", 10)
    large = await _work_of_one_approval(tmp_path / "large.db", 2_000)
    assert large == small


async def test_the_pending_listing_reads_the_pending_ones(tmp_path):
    """Decided approvals do not count: the listing's work is the same with 10 and
    with 2,000 of them beside the same pending ones."""
    work = []
    for others in (10, 2_000):
        async with SQLiteEventStore.open(tmp_path / f"{others}.db") as store:
            for i in range(others):
                await store.append(APPROVALS_STREAM, [request(f"old-{i}"), ApprovalDecided(
                    approval_id=f"old-{i}", decision="denied", by="operator:cli", at=NOW)])
            await store.append(APPROVALS_STREAM, [request("p1"), request("p2", expires_at=NOW + 1)])
            assert await expire_due(store, NOW) == []  # the sweep indexes what it found

            def listing(log: Any) -> list[str]:
                with counting(log.conn) as steps:
                    found = approvals_on(log.sql, log.decode, status="pending")
                work.append(steps[0])
                return list(found)

            assert await store.read_with(listing) == ["p1", "p2"]
    assert work[0] == work[1]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_older_log_is_read_decided_claimed_and_listed(tmp_path, backend):
    """A log written before the index: its approvals are found by the first read
    (which builds the index, the store being writable), then decided and claimed
    through it."""
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            await _log_of(store, 30)
            await store.append(APPROVALS_STREAM, [request("late", expires_at=NOW - 1)])
            listed = await read_approvals(store)
            assert len(listed) == 31 and listed["other-1"].used_by == "run-1"
            assert sorted(await read_approvals(store, status="pending")) == sorted(
                [f"other-{i}" for i in range(0, 30, 2)] + ["late"])
            assert (await read_approval(store, "other-3")).decision.decision == "approved"

            await store.transact(lambda tx: decide_in(tx, NOW, "other-4", "denied", by="operator:cli"))
            with pytest.raises(ApprovalNotPending):
                await store.transact(lambda tx: decide_in(tx, NOW, "other-5", "denied", by="operator:cli"))
            assert await store.transact(lambda tx: claim_in(tx, NOW, "other-4", "run-x"))
            assert not await store.transact(lambda tx: claim_in(tx, NOW, "other-5", "run-x"))
            assert [d.approval_id for d in await expire_due(store, NOW)] == ["late"]

            approvals = await read_approvals(store)
            assert (approvals["other-4"].status, approvals["other-4"].used_by) == ("denied", "run-x")
            assert approvals["late"].status == "timed_out"
            pending = await read_approvals(store, status="pending")
            assert sorted(pending) == sorted(f"other-{i}" for i in range(0, 30, 2) if i != 4)
            assert list(await read_approvals(store, status="all", limit=2)) == ["other-29", "late"]
            assert list(await read_approvals(store, status="approved", limit=2)) == ["other-27", "other-29"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_two_deciders_racing_leave_one_decision(tmp_path, backend):
    """Two stores on one database (two processes), each deciding the same requests
    at once: every request ends with exactly one decision, and each decider that
    lost was told so."""
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as first, open_on(backend, where) as second:
            ids = [f"race-{i}" for i in range(20)]
            await first.append(APPROVALS_STREAM, [request(i) for i in ids])
            outcomes: list[str] = []

            async def decide(store, approval_id: str, decision: str) -> None:
                try:
                    await store.transact(lambda tx: decide_in(tx, NOW, approval_id, decision, by="operator:cli"))
                    outcomes.append(decision)
                except ApprovalNotPending:
                    outcomes.append("refused")

            async with trio.open_nursery() as nursery:
                for approval_id in ids:
                    nursery.start_soon(decide, first, approval_id, "approved")
                    nursery.start_soon(decide, second, approval_id, "denied")
            decisions = [r.event.approval_id for r in await first.read_stream(APPROVALS_STREAM)
                         if isinstance(r.event, ApprovalDecided)]
            assert sorted(decisions) == sorted(ids)
            assert outcomes.count("refused") == len(ids)
            approvals = await read_approvals(second)
            assert all(approvals[i].status in ("approved", "denied") for i in ids)

