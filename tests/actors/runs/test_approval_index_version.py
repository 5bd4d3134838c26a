"""An approvals index an older gormes built, then redacted: its redactions left
the rows as they were (a redacted decision's approval still `approved`, a
redacted request still `pending`), and it recorded no version. This gormes
records the rules that built the index (`approval_index.VERSION`, a row of
`projection_versions`) and trusts only an index built by them: a store that may
write builds it again at its first read or write, a read-only one folds the
whole stream and writes nothing, and the doctor names it (decision 0057's
addendum). Every read agrees with the whole stream's fold, the oracle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from approval_helpers import NOW, assert_reads_agree, database, open_on, request, whole_stream_fold
from pg_helpers import url_for_schema

from gormes.actors.runs.approval_book import expire_due, read_approvals
from gormes.dashboard.control import ControlWatch
from gormes.doctor import CheckResult, all_checks, run_doctor
from gormes.events.approvals import APPROVALS_STREAM, ApprovalDecided, ApprovalRequested, ApprovalUsed
from gormes.events.base import Recorded
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller
from gormes.projections import approval_index
from gormes.projections.bookkeeping import has_table
from gormes.providers.pricing import PricingTable
from gormes.tools.builtin import default_registry

BACKENDS = ["sqlite", "postgres"]
IDS = ["a1", "a2", "p1", "p2", "p3"]

# The index as the older gormes made it (no row in projection_versions).
_V1_DDL = (
    "CREATE TABLE approval_index(position {integer} PRIMARY KEY, approval_id TEXT, status TEXT)",
    "CREATE INDEX approval_index_id ON approval_index(approval_id, position)",
    "CREATE INDEX approval_index_status ON approval_index(status, position) WHERE status IS NOT NULL",
)


def _v1_rows(records: list[Recorded]) -> list[tuple[int, str | None, str | None]]:
    """The rows the older gormes's index held for `records`: one per event, a
    request's holding its first decision."""
    decided: dict[str, str] = {}
    for r in records:
        if isinstance(r.event, ApprovalDecided):
            decided.setdefault(r.event.approval_id, r.event.decision)
    rows = []
    for r in records:
        event = r.event
        about = event.approval_id if isinstance(event, (ApprovalRequested, ApprovalDecided, ApprovalUsed)) else None
        status = decided.get(event.approval_id, "pending") if isinstance(event, ApprovalRequested) else None
        rows.append((r.position, about, status))
    return rows


async def _redact(store: Any, tmp_path: Path, position: int) -> None:
    executor = Executor(default_registry(), store, workspace=tmp_path)
    await executor.call("log.redact", {"position": position, "reason": "asked"}, Caller(trust="operator", id="cli"))


async def _older_gormes_database(store: Any, tmp_path: Path, backend: str) -> list[tuple]:
    """a1 approved (its decision since redacted: pending again, and past its
    timeout), a2 denied, p1-p3 pending (p3's request since redacted), as the older
    gormes left them: indexed, then redacted with the index's rows untouched. The
    stale rows."""
    await store.append(APPROVALS_STREAM, [request("a1", expires_at=NOW - 1), *(request(i) for i in IDS[1:])])
    await store.append(APPROVALS_STREAM, [
        ApprovalDecided(approval_id="a1", decision="approved", by="operator:cli", at=NOW),
        ApprovalDecided(approval_id="a2", decision="denied", by="operator:cli", at=NOW),
    ])
    records = await store.read_stream(APPROVALS_STREAM)
    rows = _v1_rows(records)  # indexed before the redactions
    at = {(type(r.event), r.event.approval_id): r.position for r in records}
    await _redact(store, tmp_path, at[(ApprovalDecided, "a1")])  # no index yet: nothing re-indexed
    await _redact(store, tmp_path, at[(ApprovalRequested, "p3")])
    integer = "BIGINT" if backend == "postgres" else "INTEGER"

    def write_v1_index(tx: Any) -> None:
        for statement in _V1_DDL:
            tx.conn.execute(statement.format(integer=integer))
        tx.conn.executemany("INSERT INTO approval_index(position, approval_id, status) VALUES (?, ?, ?)", rows)

    await store.transact(write_v1_index)
    return rows


def _doctor_says(where: str, backend: str) -> CheckResult:
    report = run_doctor(Path(where) if backend == "sqlite" else url_for_schema(where), offline=True,
                        checks=[c for c in all_checks() if c.name == "projections.approval_index"])
    [result] = [c for c in report.checks if c.name == "projections.approval_index"]
    return result


def _rows(conn: Any) -> list[tuple]:
    return [tuple(row) for row in conn.execute(
        "SELECT position, approval_id, status FROM approval_index ORDER BY position").fetchall()]


def _marker(conn: Any) -> list[tuple]:
    if not has_table(conn, "projection_versions"):
        return []
    return [tuple(row) for row in conn.execute(
        "SELECT version FROM projection_versions WHERE projection = 'approval_index'").fetchall()]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_first_read_that_may_write_builds_an_older_index_again(tmp_path, backend):
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            stale = await _older_gormes_database(store, tmp_path, backend)
            assert await store.read_sql(_rows) == stale and await store.read_sql(_marker) == []
        async with open_on(backend, where) as store:  # the upgraded gormes
            oracle = await assert_reads_agree(store, IDS)
            assert oracle["a1"].pending and "p3" not in oracle
            assert list(await read_approvals(store, status="pending")) == ["a1", "p1", "p2"]
            assert await store.read_sql(_marker) == [(approval_index.VERSION,)]
            assert await store.read_sql(_rows) != stale
            assert not await store.read_sql(approval_index.lags)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_worker_sweep_builds_an_older_index_again_and_times_out_what_it_hid(tmp_path, backend):
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            await _older_gormes_database(store, tmp_path, backend)
        async with open_on(backend, where) as store:
            timed_out = await expire_due(store, NOW)
            assert [d.approval_id for d in timed_out] == ["a1"]  # pending since its decision was redacted
            assert (await assert_reads_agree(store, IDS))["a1"].status == "timed_out"
            assert await store.read_sql(_marker) == [(approval_index.VERSION,)]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_read_only_store_folds_the_stream_past_an_older_index_and_writes_nothing(tmp_path, backend):
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            stale = await _older_gormes_database(store, tmp_path, backend)
            oracle = await whole_stream_fold(store)
        async with open_on(backend, where, readonly=True) as store:
            assert await assert_reads_agree(store, IDS) == oracle
            approvals, _ = await ControlWatch(store).read(now=NOW / 1000, pricing=PricingTable({}))
            assert [row.id for row in approvals] == ["a1", "p1", "p2"]
        async with open_on(backend, where) as store:
            assert await store.read_sql(_rows) == stale and await store.read_sql(_marker) == []


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_doctor_names_an_older_index_until_it_is_built_again(tmp_path, backend):
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            await _older_gormes_database(store, tmp_path, backend)
        stale = _doctor_says(where, backend)
        assert stale.status == "warn" and "no version recorded" in stale.message and stale.remediation
        async with open_on(backend, where) as store:
            await read_approvals(store)
        built = _doctor_says(where, backend)
        assert built.status == "ok", built.message


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_index_built_by_this_gormes_is_read_as_it_is(tmp_path, backend):
    """Not built again at each open: a reopened store's reads make no write."""
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            await store.append(APPROVALS_STREAM, [request(i) for i in IDS])
            await read_approvals(store)  # builds it
            assert await store.read_sql(_marker) == [(approval_index.VERSION,)]
            rows = await store.read_sql(_rows)
        async with open_on(backend, where) as store:
            writes: list[Any] = []
            transact = store.transact
            store.transact = lambda fn: writes.append(fn) or transact(fn)  # type: ignore[method-assign]
            await assert_reads_agree(store, IDS)
            assert writes == []
            assert await store.read_sql(_rows) == rows


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_read_of_a_log_without_approvals_builds_nothing(tmp_path, backend):
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            assert await read_approvals(store) == {}
            approvals, _ = await ControlWatch(store).read(now=NOW / 1000, pricing=PricingTable({}))
            assert approvals == ()
            assert not await store.read_sql(lambda conn: has_table(conn, approval_index.TABLE))
