"""approval.list, approval.approve and approval.deny: the operator's approval gates.

A run's call of an operation that needs approval waits for one of these
(gormes/actors/runs/approvals.py, decision 0033). Deciding is the operator's
alone: the trust class is `operator` only, and a call that comes from a run (its
caller names a run) is refused whatever its class, so no agent can approve its own
request, nor a subagent or a gateway anyone's. Never offered to models; `gormes
mcp --trust operator` serves them (gormes/mcp_server.py `OPERATOR_MCP`), and
`gormes approve|deny|approvals list` and `gormes top`'s keys call them, audited
like every other operation (decision 0019).

A decision on a request that is unknown or no longer pending is refused (one
line, nothing written); one that is made resumes the job the request parked.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from gormes.actors.runs.approval_book import decide_in, read_approval, read_approvals
from gormes.events.approvals import Approval
from gormes.ops.spec import OperationContext, OperationDenied, OperationSpec, OperationUnavailable

OPERATOR = frozenset({"operator"})
READERS = frozenset({"operator", "system"})

ApprovalId = Annotated[str, msgspec.Meta(min_length=1, max_length=200, description="The approval request's id.")]
Reason = Annotated[str, msgspec.Meta(min_length=1, max_length=2000, description="Why: recorded with the decision.")]


class ApprovalView(msgspec.Struct, kw_only=True):
    id: str
    status: str  # pending, approved, denied, timed_out
    operation: str
    arguments: str
    run_id: str | None  # None: a call outside any run (an MCP client's)
    job_id: str | None
    caller: str
    trust: str
    why: str
    requested_at: int
    expires_at: int | None
    on_timeout: str
    decided_by: str | None = None
    decided_at: int | None = None
    reason: str | None = None
    resumed_job: str | None = None
    used_by: str | None = None  # the run whose call the decision served (once)


def view(a: Approval) -> ApprovalView:
    r, d = a.request, a.decision
    return ApprovalView(
        id=r.approval_id, status=a.status, operation=r.operation, arguments=r.arguments, run_id=r.run_id,
        job_id=r.job_id, caller=r.caller, trust=r.trust, why=r.why, requested_at=r.at, expires_at=r.expires_at,
        on_timeout=r.on_timeout, decided_by=None if d is None else d.by, decided_at=None if d is None else d.at,
        reason=None if d is None else d.reason, resumed_job=None if d is None else d.resumed_job,
        used_by=a.used_by,
    )


class ApprovalListInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Approval requests, newest first."""

    status: Annotated[Literal["pending", "approved", "denied", "timed_out", "all"], msgspec.Meta(
        description="Which requests: pending (the default), a decision, or all.")] = "pending"
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000, description="At most this many.")] = 100


class ApprovalList(msgspec.Struct, kw_only=True):
    approvals: list[ApprovalView]


class ApprovalDecideInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The pending request to decide, and why."""

    id: ApprovalId
    reason: Reason


def _store(ctx: OperationContext):  # noqa: ANN202 - the EventStore protocol
    if ctx.store is None:
        raise OperationUnavailable("the approval operations need an event store")
    return ctx.store


async def approval_list(ctx: OperationContext, value: ApprovalListInput) -> ApprovalList:
    chosen = list((await read_approvals(_store(ctx), status=value.status, limit=value.limit)).values())
    chosen.reverse()  # newest first
    return ApprovalList(approvals=[view(a) for a in chosen])


def _decider(ctx: OperationContext) -> str:
    caller = ctx.caller
    if caller.run_id is not None:
        raise OperationDenied(f"a run may not decide approvals (caller {caller.id})")
    return f"{caller.trust}:{caller.id}"


async def _decide(ctx: OperationContext, value: ApprovalDecideInput, decision: Literal["approved", "denied"]) -> ApprovalView:
    by, store = _decider(ctx), _store(ctx)
    now = int(ctx.clock() * 1000)

    def decide(tx: Any) -> None:
        decide_in(tx, now, value.id, decision, by=by, reason=value.reason)
        ctx.seal_into(tx)  # the decision and its audit record commit together

    await store.transact(decide)
    decided = await read_approval(store, value.id)
    assert decided is not None  # decided just now
    return view(decided)


async def approval_approve(ctx: OperationContext, value: ApprovalDecideInput) -> ApprovalView:
    return await _decide(ctx, value, "approved")


async def approval_deny(ctx: OperationContext, value: ApprovalDecideInput) -> ApprovalView:
    return await _decide(ctx, value, "denied")


SPECS = (
    OperationSpec(
        name="approval.list", description="List approval requests (pending by default), newest first.",
        input_type=ApprovalListInput, output_type=ApprovalList, handler=approval_list, trust=READERS,
        audit_kind="approval.read", timeout=30.0, operator_mcp=True,
    ),
    OperationSpec(
        name="approval.approve",
        description="Approve a pending approval request: the run's call goes on (its parked job resumes).",
        input_type=ApprovalDecideInput, output_type=ApprovalView, handler=approval_approve, trust=OPERATOR,
        audit_kind="approval.write", mutating=True, idempotent=False, timeout=30.0, operator_mcp=True,
    ),
    OperationSpec(
        name="approval.deny",
        description="Deny a pending approval request: the run's call fails as a denied tool call.",
        input_type=ApprovalDecideInput, output_type=ApprovalView, handler=approval_deny, trust=OPERATOR,
        audit_kind="approval.write", mutating=True, idempotent=False, timeout=30.0, operator_mcp=True,
    ),
)
