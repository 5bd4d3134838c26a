"""Approval events: an operation call held until a person approves or denies it.

An operation may require approval (`OperationSpec.requires_approval`, or the
deployment's list of names and patterns: decision 0033). When a run calls one, it
records, in one transaction:

- on its own stream the observation `run.approval_requested` (replay serves it);
- on the stream `approvals` (every approval's request, decision and claim, read
  by id and by status through its index: decision 0057) `approval.requested`:
  the operation, its arguments, who asks (the run, its job, its trust class) and
  why it needs approval, with the timeout policy that applies;
- an audit event.

The decision is `approval.decided` on `approvals` (approved, denied, or timed_out:
who, when, why), appended in the transaction that read the request and found it
still pending, so exactly one decision stands. The run then records the
decision it was served as `run.approval_decided` on its own stream, so a replay
(or a resumed attempt) serves the same decision and never asks again. In the
same transaction it claims the decision with `approval.used` on `approvals`: a
decision serves one call of one run, once. A fork or a second resume of a prefix
that ends on the request finds it used and asks again (an attacker's finding: a
fork at the request ran the approved call a second time).

Times are integer milliseconds since the epoch.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from gormes.events.base import Event

APPROVALS_STREAM = "approvals"

Decision = Literal["approved", "denied", "timed_out"]
# What a request that times out becomes: a denial (the call fails as a tool error)
# or the run's failure.
OnTimeout = Literal["deny", "fail"]
ON_TIMEOUT: tuple[str, ...] = ("deny", "fail")


class ApprovalRequested(Event, tag="approval.requested", kw_only=True):
    approval_id: str
    operation: str
    arguments: str  # the call's canonical JSON text
    args_hash: str
    run_id: str | None = None  # None: a call outside any run (an MCP client's)
    job_id: str | None = None
    caller: str  # the caller id the call would run as ("run-<id>", "mcp:<client name>")
    trust: str  # its trust class
    why: str  # why it needs approval: its spec, or the deployment rule that matched
    timeout_s: float | None = None  # None: it waits until decided
    on_timeout: OnTimeout = "deny"
    expires_at: int | None = None
    at: int


class ApprovalDecided(Event, tag="approval.decided", kw_only=True):
    approval_id: str
    decision: Decision
    by: str  # "<trust>:<caller id>" of who decided ("system:approval-timeout" for a timeout)
    reason: str = ""
    resumed_job: str | None = None  # the parked job this decision resumed
    at: int


class ApprovalUsed(Event, tag="approval.used", kw_only=True):
    """The run whose call a decision served (claimed once, in the transaction that
    records the run's `run.approval_decided`)."""

    approval_id: str
    run_id: str
    at: int


# -- the run's own record (observations, with `seq`: see gormes/events/runs.py) --------


class RunApprovalRequested(Event, tag="run.approval_requested", kw_only=True, gc=False):
    seq: int
    approval_id: str
    operation: str
    args_hash: str
    why: str


class RunApprovalDecided(Event, tag="run.approval_decided", kw_only=True, gc=False):
    seq: int
    approval_id: str
    decision: Decision
    by: str
    reason: str = ""
    on_timeout: OnTimeout = "deny"  # what a timed_out decision means for the call
    at: int


# -- the fold of `approvals` -----------------------------------------------------------


class Approval(msgspec.Struct, frozen=True, kw_only=True):
    """One approval as the stream tells it: its request and its decision, if any."""

    request: ApprovalRequested
    decision: ApprovalDecided | None = None
    requested_position: int = 0
    used_by: str | None = None  # the run whose call the decision served (`approval.used`)

    @property
    def pending(self) -> bool:
        return self.decision is None

    @property
    def status(self) -> str:
        return "pending" if self.decision is None else self.decision.decision


def fold_approvals(events: list[tuple[int, Event]]) -> dict[str, Approval]:
    """(position, event) pairs of the `approvals` stream, in order -> approvals by id.
    A decision for an unknown id, or a second decision, is ignored (the writers
    never make one: they decide in the transaction that read the request). Each
    approval is folded from its own events alone, so the pairs may be only some
    approvals' events (what the index reads)."""
    approvals: dict[str, Approval] = {}
    for position, event in events:
        if isinstance(event, ApprovalRequested):
            approvals.setdefault(event.approval_id, Approval(request=event, requested_position=position))
        elif isinstance(event, ApprovalDecided):
            known = approvals.get(event.approval_id)
            if known is not None and known.decision is None:
                approvals[event.approval_id] = msgspec.structs.replace(known, decision=event)
        elif isinstance(event, ApprovalUsed):
            known = approvals.get(event.approval_id)
            if known is not None and known.used_by is None:
                approvals[event.approval_id] = msgspec.structs.replace(known, used_by=event.run_id)
    return approvals
