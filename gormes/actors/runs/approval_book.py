"""The approvals stream: reading it, deciding a request, timing requests out.

Every approval's request and decision is on the one stream `approvals`
(gormes/events/approvals.py). They are read through the approvals index
(gormes/projections/approval_index.py, decision 0057): one approval from its own
events, a listing from the approvals it lists, never the whole stream. Each
transaction here first indexes what was appended since the last one. On a
database whose index is missing or was built by an older gormes (not
`approval_index.current`), the first read on a store that may write builds it
again (`index_approvals`); a read-only store folds the whole stream.

A decision is made in the transaction that read the request and found it
pending, under the store's write lock: exactly one decision stands, whoever
races. The same transaction resumes the job the request parked
(gormes/actors/jobs/parking.py), so a decision never misses its job and a job
never misses its decision.

A request past its `expires_at` is timed out (`decision="timed_out"`, by
`system:approval-timeout`) by whoever looks first: the waiting run, the sweep a
worker runs (`expire_due`), the approvals list.

Errors a person can fix are `UserError`s: an unknown id, a request no longer
pending (one line, nothing changed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gormes.actors.jobs.parking import unpark_in
from gormes.errors import UserError
from gormes.events.approvals import (
    APPROVALS_STREAM, Approval, ApprovalDecided, ApprovalRequested, ApprovalUsed, Decision,
    RunApprovalDecided,
)
from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.audit_chain import append_sealed
from gormes.events.base import Recorded
from gormes.events.codec import default_codec
from gormes.events.runs import run_stream
from gormes.events.store import AppendRequest, EventStore, Transaction
from gormes.projections import approval_index

TIMEOUT_BY = "system:approval-timeout"

T = TypeVar("T")
_UNINDEXED = object()


class UnknownApproval(UserError):
    """No approval request has that id."""


class ApprovalNotPending(UserError):
    """The request was already decided (approved, denied, timed out)."""


def approval_key(approval_id: str) -> str:
    """What a job parked on this approval is parked on (parking.py's key)."""
    return f"approval-{approval_id}"


def _decode(rows: Sequence[Any]) -> list[Recorded]:
    return default_codec.decode_rows(rows, Recorded)


def _indexed(tx: Transaction) -> tuple[Any, int]:
    """The transaction's connection, with the approvals index caught up, and the
    version of `approvals` it has indexed."""
    tx.flush()  # what this transaction appended so far is indexed too
    return tx.conn, approval_index.catch_up(tx.conn, _decode)


def _index(tx: Transaction) -> None:
    """A transaction that only builds or catches up the index."""
    _indexed(tx)


async def index_approvals(store: EventStore) -> None:
    """Build or catch up the index (missing or built by an older gormes: only runs
    and `gormes append` wrote since, or an older gormes did), so the reads after it
    stop folding the whole stream; in one write transaction, and only when there
    is something to index. Nothing on a store that may not write."""
    if not store.readonly and await store.read_sql(approval_index.lags):
        await store.transact(_index)


async def _read(store: EventStore, read: Callable[[Any, Any, int | None], T]) -> T:
    """`read(conn, decode, indexed)` on a read connection, the index built first
    where it is not current, the store may write and `approvals` has events
    (`index_approvals`): looked up once, in the same read, so a read through the
    index costs what it did before."""

    def attempt(log: Any) -> Any:
        indexed = approval_index.indexed_version(log.sql)
        if indexed is None and not store.readonly and approval_index.lags(log.sql, indexed=None):
            return _UNINDEXED
        return read(log.sql, log.decode, indexed)

    got = await store.read_with(attempt)
    if got is _UNINDEXED:
        await store.transact(_index)
        got = await store.read_with(lambda log: read(log.sql, log.decode, approval_index.indexed_version(log.sql)))
    return got  # type: ignore[no-any-return]


def approval_in(tx: Transaction, approval_id: str) -> Approval | None:
    conn, indexed = _indexed(tx)
    return approval_index.approval_on(conn, _decode, approval_id, indexed=indexed)


def pending_in(tx: Transaction) -> dict[str, Approval]:
    conn, indexed = _indexed(tx)
    return approval_index.approvals_on(conn, _decode, status="pending", indexed=indexed)


async def read_approval(store: EventStore, approval_id: str) -> Approval | None:
    return await _read(store, lambda conn, decode, indexed: approval_index.approval_on(
        conn, decode, approval_id, indexed=indexed))


async def read_approvals(store: EventStore, *, status: str = "all", limit: int | None = None) -> dict[str, Approval]:
    """The newest `limit` approvals of `status` (pending, approved, denied,
    timed_out, or all) by id, oldest first."""
    return await _read(store, lambda conn, decode, indexed: approval_index.approvals_on(
        conn, decode, status=status, limit=limit, indexed=indexed))


def _expired(approval: Approval, now: int) -> bool:
    expires = approval.request.expires_at
    return approval.pending and expires is not None and expires <= now


def claim_in(tx: Transaction, now: int, approval_id: str, run_id: str) -> bool:
    """Claim a decided request's decision for `run_id`'s call (`approval.used`), in
    `tx`; False, nothing written, when another run's call has used it already."""
    approval = approval_in(tx, approval_id)
    if approval is not None and approval.used_by is not None:
        return approval.used_by == run_id
    if approval is not None and _served_before_claims(tx, approval, run_id):
        return False
    tx.append(APPROVALS_STREAM, [ApprovalUsed(approval_id=approval_id, run_id=run_id, at=now)])
    return True


def _served_before_claims(tx: Transaction, approval: Approval, run_id: str) -> bool:
    """Whether the requesting run recorded the decision itself, as a run did before
    decisions were claimed (`approval.used`): such a decision served its call."""
    asked_by = approval.request.run_id
    if asked_by is None or asked_by == run_id:
        return False
    recorded = tx.read_stream(run_stream(asked_by), 0, (RunApprovalDecided.__struct_config__.tag,))
    return any(r.event.approval_id == approval.request.approval_id for r in recorded)


def decide_in(
    tx: Transaction, now: int, approval_id: str, decision: Decision, *, by: str, reason: str = "",
) -> ApprovalDecided:
    """Decide a pending request in `tx` and resume the job it parked, if any. A
    request past its timeout is timed out first and `ApprovalNotPending` raised."""
    approval = approval_in(tx, approval_id)
    if approval is None:
        raise UnknownApproval(f"no approval request {approval_id!r} (see `gormes approvals list`)")
    if _expired(approval, now) and decision != "timed_out":
        # nothing is written (the timeout is recorded by whoever waits, or the sweep)
        raise ApprovalNotPending(f"approval {approval_id} is not pending: its timeout has passed")
    if approval.decision is not None:
        d = approval.decision
        raise ApprovalNotPending(f"approval {approval_id} is not pending: {d.decision} by {d.by}")
    return _decide(tx, now, approval, decision, by, reason)


def _decide(tx: Transaction, now: int, approval: Approval, decision: Decision, by: str,
            reason: str) -> ApprovalDecided:
    request = approval.request
    resumed = request.job_id is not None and unpark_in(tx, now, request.job_id, on=approval_key(request.approval_id))
    event = ApprovalDecided(
        approval_id=request.approval_id, decision=decision, by=by, reason=reason,
        resumed_job=request.job_id if resumed else None, at=now,
    )
    tx.append(APPROVALS_STREAM, [event])
    return event


def decision_in(tx: Transaction, now: int, approval_id: str) -> tuple[ApprovalDecided | None, bool]:
    """(the request's decision, whether it was recorded just now): a request past
    its timeout is timed out here. (None, False) while it is pending: what a parker
    checks before it parks."""
    approval = approval_in(tx, approval_id)
    if approval is None:
        raise UnknownApproval(f"no approval request {approval_id!r}")
    if approval.decision is not None:
        return approval.decision, False
    if _expired(approval, now):
        return _decide(tx, now, approval, "timed_out", TIMEOUT_BY, "no decision before its timeout"), True
    return None, False


async def expire(store: EventStore, now: int, approval_id: str) -> ApprovalDecided | None:
    """Time the request out if it is past its timeout (audited); the decision that stands."""
    decision, now_recorded = await store.transact(lambda tx: decision_in(tx, now, approval_id))
    if now_recorded:
        await audit_timeout(store, decision)
    return decision


async def audit_timeout(store: EventStore, decision: ApprovalDecided, request: ApprovalRequested | None = None) -> None:
    """A timeout is the system's decision, audited as one (an operator's approve or
    deny is audited by the executor, as every operation is)."""
    await append_sealed(store, AppendRequest(audit_stream(decision.at), [OperationAudited(
        operation="approval.expire", audit_kind="approval.write", caller="approval-timeout", trust="system",
        run_id=None if request is None else request.run_id, job_id=decision.resumed_job,
        allowed=True, outcome="ok", duration_ms=0.0, mutating=True, at=decision.at,
    )]))


async def expire_due(store: EventStore, now: int) -> list[ApprovalDecided]:
    """Time out every pending request past its timeout, resuming the jobs they
    parked (a worker's sweep). Reads the pending requests first, and writes only
    when one is due or the index lags the stream: so the sweep also keeps the
    index caught up with requests nobody has decided yet, and builds it again on
    a database an older gormes wrote."""

    def look(log: Any) -> tuple[bool, bool]:
        indexed = approval_index.indexed_version(log.sql)
        pending = approval_index.approvals_on(log.sql, log.decode, status="pending", indexed=indexed)
        return any(_expired(a, now) for a in pending.values()), approval_index.lags(log.sql, indexed=indexed)

    due, lags = await store.read_with(look)
    if not due and not lags:
        return []

    def run(tx: Transaction) -> list[tuple[ApprovalDecided, ApprovalRequested]]:
        return [
            (_decide(tx, now, a, "timed_out", TIMEOUT_BY, "no decision before its timeout"), a.request)
            for a in pending_in(tx).values() if _expired(a, now)
        ]

    decided = await store.transact(run)
    for decision, request in decided:
        await audit_timeout(store, decision, request)
    return [d for d, _ in decided]
