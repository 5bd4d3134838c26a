"""The approvals stream: reading it, deciding a request, timing requests out.

Every approval's request and decision is on the one stream `approvals`
(gormes/events/approvals.py), so a listing reads one stream. A decision is made
in the transaction that read the stream and found the request pending, appended
with the version it read: exactly one decision stands, whoever races. The same
transaction resumes the job the request parked (gormes/actors/jobs/parking.py),
so a decision never misses its job and a job never misses its decision.

A request past its `expires_at` is timed out (`decision="timed_out"`, by
`system:approval-timeout`) by whoever looks first: the waiting run, the sweep a
worker runs (`expire_due`), the approvals list.

Errors a person can fix are `UserError`s: an unknown id, a request no longer
pending (one line, nothing changed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gormes.actors.jobs.parking import unpark_in
from gormes.errors import UserError
from gormes.events.approvals import (
    APPROVALS_STREAM, Approval, ApprovalDecided, ApprovalRequested, ApprovalUsed, Decision,
    RunApprovalDecided, fold_approvals,
)
from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.audit_chain import append_sealed
from gormes.events.runs import run_stream
from gormes.events.store import AppendRequest, EventStore, Transaction

TIMEOUT_BY = "system:approval-timeout"


class UnknownApproval(UserError):
    """No approval request has that id."""


class ApprovalNotPending(UserError):
    """The request was already decided (approved, denied, timed out)."""


def approval_key(approval_id: str) -> str:
    """What a job parked on this approval is parked on (parking.py's key)."""
    return f"approval-{approval_id}"


def _fold(records: Sequence[Any]) -> dict[str, Approval]:
    return fold_approvals([(r.position, r.event) for r in records])


def approvals_in(tx: Transaction) -> dict[str, Approval]:
    return _fold(tx.read_stream(APPROVALS_STREAM))


async def read_approvals(store: EventStore) -> dict[str, Approval]:
    """Every approval by id, oldest first (one stream read)."""
    return _fold(await store.read_stream(APPROVALS_STREAM))


def _expired(approval: Approval, now: int) -> bool:
    expires = approval.request.expires_at
    return approval.pending and expires is not None and expires <= now


def claim_in(tx: Transaction, now: int, approval_id: str, run_id: str) -> bool:
    """Claim a decided request's decision for `run_id`'s call (`approval.used`), in
    `tx`; False, nothing written, when another run's call has used it already."""
    approval = approvals_in(tx).get(approval_id)
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
    approvals = approvals_in(tx)
    approval = approvals.get(approval_id)
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
    approval = approvals_in(tx).get(approval_id)
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
    parked (a worker's sweep); reads the stream first and writes only when one is due."""
    due = [a for a in (await read_approvals(store)).values() if _expired(a, now)]
    if not due:
        return []

    def run(tx: Transaction) -> list[tuple[ApprovalDecided, ApprovalRequested]]:
        return [
            (_decide(tx, now, a, "timed_out", TIMEOUT_BY, "no decision before its timeout"), a.request)
            for a in approvals_in(tx).values() if _expired(a, now)
        ]

    decided = await store.transact(run)
    for decision, request in decided:
        await audit_timeout(store, decision, request)
    return [d for d, _ in decided]
