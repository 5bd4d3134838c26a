"""A redaction (`gormes redact`, the `log.redact` operation) of an approval's
request, decision or claim after the approvals index indexed it: every read
still returns what the fold of the whole stream says, the oracle (decision 0057).
A redacted decision leaves its approval pending, listed as pending and decided
again; a redacted request makes it unknown and takes it out of every listing,
the limited ones too; a redacted claim leaves its decision unused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from approval_helpers import NOW, assert_reads_agree, database, open_on, request

from gormes.actors.runs.approval_book import claim_in, decide_in, pending_in
from gormes.events.approvals import APPROVALS_STREAM, ApprovalDecided, ApprovalRequested, ApprovalUsed
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller
from gormes.tools.builtin import default_registry

BACKENDS = ["sqlite", "postgres"]
IDS = ["a1", "a2", "a3", "p1", "p2", "p3", "t1"]


async def _position_of(store: Any, kind: type, approval_id: str) -> int:
    [position] = [r.position for r in await store.read_stream(APPROVALS_STREAM)
                  if isinstance(r.event, kind) and r.event.approval_id == approval_id]
    return position


async def _redact(store: Any, tmp_path: Path, **what: Any) -> None:
    """As `gormes redact --position N` or `--stream S` does: the operator's call."""
    executor = Executor(default_registry(), store, workspace=tmp_path)
    await executor.call("log.redact", {**what, "reason": "asked"}, Caller(trust="operator", id="cli"))


async def _decide(store: Any, approval_id: str, decision: str) -> None:
    await store.transact(lambda tx: decide_in(tx, NOW, approval_id, decision, by="operator:cli"))


async def _claim(store: Any, approval_id: str, run_id: str) -> bool:
    return await store.transact(lambda tx: claim_in(tx, NOW, approval_id, run_id))


async def _indexed_log(store: Any) -> None:
    """a1 approved and claimed, a2 denied, a3 approved and claimed, p1-p3
    pending: each decision and claim made by the book, so all of it is indexed."""
    await store.append(APPROVALS_STREAM, [request(i) for i in ("a1", "a2", "a3", "p1", "p2", "p3")])
    await _decide(store, "a1", "approved")
    await _decide(store, "a2", "denied")
    await _decide(store, "a3", "approved")
    assert await _claim(store, "a1", "run-1") and await _claim(store, "a3", "run-3")
    await store.transact(pending_in)  # indexes the claims too


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_redacted_decision_leaves_its_approval_pending_in_every_read(tmp_path, backend):
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            await _indexed_log(store)
            await assert_reads_agree(store, IDS)
            await _redact(store, tmp_path, position=await _position_of(store, ApprovalDecided, "a1"))
            oracle = await assert_reads_agree(store, IDS)
            assert oracle["a1"].pending and list(oracle)[0] == "a1"  # the oldest pending one

            await _decide(store, "a1", "denied")  # decided again
            assert (await assert_reads_agree(store, IDS))["a1"].status == "denied"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_redacted_request_leaves_every_listing_and_its_limit(tmp_path, backend):
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            await _indexed_log(store)
            await _redact(store, tmp_path, position=await _position_of(store, ApprovalRequested, "p3"))
            await _redact(store, tmp_path, position=await _position_of(store, ApprovalRequested, "a3"))
            oracle = await assert_reads_agree(store, IDS)  # the newest 2 pending: p1 and p2
            assert "p3" not in oracle and "a3" not in oracle


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_redacted_claim_leaves_its_decision_unused(tmp_path, backend):
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            await _indexed_log(store)
            await _redact(store, tmp_path, position=await _position_of(store, ApprovalUsed, "a3"))
            oracle = await assert_reads_agree(store, IDS)
            assert (oracle["a3"].status, oracle["a3"].used_by) == ("approved", None)

            assert await _claim(store, "a3", "run-30")  # claimed again
            assert (await assert_reads_agree(store, IDS))["a3"].used_by == "run-30"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_redactions_before_indexing_and_of_the_whole_stream(tmp_path, backend):
    with database(tmp_path, backend) as where:
        async with open_on(backend, where) as store:
            await _indexed_log(store)
            # A decision the index has not indexed yet, redacted before any write of the book.
            await store.append(APPROVALS_STREAM, [request("t1")])
            await store.append(APPROVALS_STREAM, [ApprovalDecided(
                approval_id="t1", decision="approved", by="operator:cli", at=NOW)])
            await _redact(store, tmp_path, position=await _position_of(store, ApprovalDecided, "t1"))
            await assert_reads_agree(store, IDS)
            await store.transact(pending_in)
            assert (await assert_reads_agree(store, IDS))["t1"].pending

            await _redact(store, tmp_path, stream=APPROVALS_STREAM)
            assert await assert_reads_agree(store, IDS) == {}
