"""Write-ahead operations (decision 0062): a `started` record committed before the
handler runs, then the call's outcome naming it; no handler without it; refusals
before the handler stay one record."""

from __future__ import annotations

import sqlite3

import pytest

from gormes.errors import StoreError
from gormes.events import audit_open
from gormes.events.audit_chain import append_sealed, verify_chains
from gormes.events.codec import default_codec
from gormes.ops.executor import Executor, WriteAheadFailed
from gormes.ops.registry import Registry
from gormes.ops.spec import (
    Caller, InvalidOperationInput, InvalidOperationSpec, OperationContext, OperationDenied, OperationUnavailable,
)
from gormes.tools.builtin import default_registry
from ops_helpers import EchoInput, EchoOutput, Recorder, audit_events, spec

OPERATOR = Caller(trust="operator", id="cli")
GATEWAY = Caller(trust="gateway", id="gw-1")


def written_ahead(recorder: Recorder, store, *, fails: bool = False, available=None) -> Registry:
    """`test.files`: a write-ahead operation whose handler notes the audit records
    committed when it ran."""

    async def files(ctx: OperationContext, value: EchoInput) -> EchoOutput:
        seen = [(e.operation, e.outcome) for e in await audit_events(store)]
        recorder.calls.append(("test.files", seen))
        if fails:
            raise RuntimeError("the disk filled up")
        return EchoOutput(text=value.text)

    return Registry([spec("test.files", files, trust={"operator"}, mutating=True, write_ahead=True,
                          available=available)])


async def test_the_started_record_commits_before_the_handler_runs_and_the_outcome_names_it(store, db_path):
    recorder = Recorder()
    out = await Executor(written_ahead(recorder, store), store).call("test.files", {"text": "a"}, OPERATOR)
    assert out == EchoOutput(text="a")
    assert recorder.calls == [("test.files", [("test.files", "started")])]
    records = await store.read_all(types=["audit.operation"])
    started, outcome = (r.event for r in records)
    assert (started.outcome, started.allowed, started.started_position) == ("started", True, None)
    assert (outcome.outcome, outcome.allowed, outcome.started_position) == ("ok", True, records[0].position)
    assert started.input_sha256 == outcome.input_sha256 and started.mutating
    conn = sqlite3.connect(db_path)
    try:
        [day] = verify_chains(conn, default_codec)
    finally:
        conn.close()
    assert (day.intact, day.sealed) == (True, 2)


async def test_a_handler_failure_after_started_is_the_outcome_record(store):
    recorder = Recorder()
    with pytest.raises(RuntimeError, match="disk filled"):
        await Executor(written_ahead(recorder, store, fails=True), store).call("test.files", {"text": "a"}, OPERATOR)
    records = await store.read_all(types=["audit.operation"])
    assert [(r.event.outcome, r.event.started_position) for r in records] == [
        ("started", None), ("error", records[0].position)]


def unavailable(ctx: OperationContext) -> None:
    raise OperationUnavailable("test.files is switched off here")


@pytest.mark.parametrize("caller, raw, error, outcome, available", [
    (GATEWAY, {"text": "a"}, OperationDenied, "denied", None),
    (OPERATOR, {"text": 1}, InvalidOperationInput, "invalid", None),
    (OPERATOR, {"text": "a"}, OperationUnavailable, "denied", unavailable),
])
async def test_a_call_refused_before_its_handler_is_one_record(store, caller, raw, error, outcome, available):
    recorder = Recorder()
    executor = Executor(written_ahead(recorder, store, available=available), store)
    with pytest.raises(error):
        await executor.call("test.files", raw, caller)
    assert recorder.calls == []
    assert [(e.outcome, e.allowed) for e in await audit_events(store)] == [(outcome, False)]


async def test_an_approval_refused_is_one_record(store):
    async def refuse(caller, spec, value):
        return "nobody approved it"

    recorder = Recorder()
    executor = Executor(written_ahead(recorder, store), store, approvals=refuse)
    with pytest.raises(OperationDenied, match="nobody approved"):
        await executor.call("test.files", {"text": "a"}, OPERATOR)
    assert recorder.calls == []
    assert [e.outcome for e in await audit_events(store)] == ["denied"]


class FirstWriteFails:
    """A store whose first write fails (a full disk, a lost server), the rest not."""

    def __init__(self, store) -> None:
        self._store = store
        self.failed = False

    async def transact(self, fn):
        if not self.failed:
            self.failed = True
            raise StoreError("database or disk is full")
        return await self._store.transact(fn)

    def __getattr__(self, name):
        return getattr(self._store, name)


async def test_without_its_started_record_the_handler_does_not_run(store):
    await store.transact(lambda tx: audit_open.ensure(tx.conn))  # so the store's first write is the record's
    recorder = Recorder()
    executor = Executor(written_ahead(recorder, store), FirstWriteFails(store))
    with pytest.raises(WriteAheadFailed, match="test.files did not run: .*disk is full"):
        await executor.call("test.files", {"text": "a"}, OPERATOR)
    assert recorder.calls == []
    [refused] = await audit_events(store)  # the failure, recorded once the store wrote again
    assert (refused.outcome, refused.allowed, refused.started_position) == ("error", False, None)
    assert refused.error.startswith("WriteAheadFailed: test.files did not run")


async def test_a_callers_audit_writer_gets_the_outcome_and_the_store_the_started_record(store):
    """A run's tool call: `started` goes to the log at once, the outcome with the
    run's own record of the call (its AuditWriter)."""
    recorder = Recorder()
    written = []

    async def writer(request, output, error):
        written.append(request.events[0])
        await append_sealed(store, request)

    await Executor(written_ahead(recorder, store), store).call("test.files", {"text": "a"}, OPERATOR, audit=writer)
    assert recorder.calls == [("test.files", [("test.files", "started")])]
    records = await store.read_all(types=["audit.operation"])
    assert [r.event.outcome for r in records] == ["started", "ok"]
    assert [e.started_position for e in written] == [records[0].position]


def test_write_ahead_is_refused_for_an_operation_that_changes_nothing():
    async def read(ctx, value):
        return EchoOutput(text=value.text)

    with pytest.raises(InvalidOperationSpec, match="not mutating"):
        Registry([spec("test.read", read, trust={"operator"}, write_ahead=True)])


def test_the_built_in_write_ahead_operations_are_those_no_transaction_covers():
    assert {s.name for s in default_registry().list() if s.write_ahead} == {
        "knowledge.write", "memory.mirror", "projections.rebuild", "shell.run"}
