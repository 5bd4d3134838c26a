"""Approval gates: a run's call of an operation that needs a person's approval.

An operation needs approval when its spec says so (`requires_approval`: the
`@gormes.operation` keyword, an MCP server's `require_approval`) or the deployment
does (`ApprovalPolicy`: GORMES_REQUIRE_APPROVAL, a comma-separated list of names and
`fnmatch` patterns: `shell.run,knowledge.write,payments.*`; the daemon's
`require_approval` setting; `gormes run --require-approval`). When a run calls one
(`LiveRunContext.tool`), the gate (decision 0033):

1. records the request: `run.approval_requested` on the run's stream,
   `approval.requested` on `approvals` (operation, arguments, who, why, the timeout
   policy) and an audit event, in one transaction;
2. waits for the decision:
   - a run driven by a job (an `agent` job's run, or a subagent of one) PARKS its job
     (gormes/actors/jobs/parking.py): paused, its lease released, no worker held;
     the worker cancels the attempt. The decision resumes the job, and its next
     attempt resumes the run from its record (decision 0011): the replayed prefix
     ends with the request, so the continuation reaches this gate live with the
     request's id (`approvals_waiting`) and reads the decision instead of asking;
   - any other run (`gormes run`, in the foreground) waits in its process for the
     decision to reach the log (the store's change wake-ups, no busy poll), or for
     its timeout;
3. records the decision it was served: `run.approval_decided`. Approved: the call
   goes through the executor as any other. Denied, or timed out under `deny`: a
   denied tool call (`run.tool_called` with outcome `denied`, ToolCallFailed).
   Timed out under `fail`: the run fails (`ApprovalTimedOut`).

Replay serves both recorded events and the call's own record (`replay_gate`) and
never asks again, whatever the policy is now.

A subagent's call parks the job its root run is the attempt of (`holding_job`):
the whole tree is cancelled, and the resumed root takes the subagent over from
its record (decision 0011), whose prefix ends with the request.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from gormes.actors.jobs.parking import park
from gormes.actors.runs.approval_book import (
    approval_key, audit_timeout, claim_in, decision_in, expire, read_approval,
)
from gormes.errors import GormesError, UserError
from gormes.events.approvals import (
    APPROVALS_STREAM, ON_TIMEOUT, Approval, ApprovalDecided, ApprovalRequested, OnTimeout,
    RunApprovalDecided, RunApprovalRequested,
)
from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.audit_chain import append_sealed
from gormes.events.jobs import MAX_DELAY_MS
from gormes.events.runs import canonical_arguments
from gormes.events.store import AppendRequest, EventStore

if TYPE_CHECKING:
    from gormes.actors.runs.live import LiveRunContext
    from gormes.actors.runs.replay_context import ReplayContext
    from gormes.ops.spec import Caller, OperationSpec

REQUIRE_ENV = "GORMES_REQUIRE_APPROVAL"
TIMEOUT_ENV = "GORMES_APPROVAL_TIMEOUT"
ON_TIMEOUT_ENV = "GORMES_APPROVAL_ON_TIMEOUT"
DEFAULT_TIMEOUT_S = 86_400.0  # a day
MAX_TIMEOUT_S = MAX_DELAY_MS / 1000  # ten years: an expiry in ms always fits the log's integers
# The operations that list and decide requests (gormes/tools/approvals.py), by their exact
# names: a prefix let a deployment's own `approval.refund` skip every gate.
DECIDING = frozenset({"approval.list", "approval.approve", "approval.deny"})


class InvalidApprovalPolicy(UserError):
    """A deployment's approval settings that cannot be used."""


class ApprovalTimedOut(GormesError):
    """A request timed out under the `fail` policy: the run fails with this."""


class ApprovalPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Which operations need approval here beyond their specs, and the timeout policy."""

    require: tuple[str, ...] = ()  # operation names and fnmatch patterns
    timeout_s: float | None = DEFAULT_TIMEOUT_S  # None: wait until decided
    on_timeout: OnTimeout = "deny"

    def __post_init__(self) -> None:
        if self.timeout_s is not None and not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            # inf passed `> 0`, and then each request's expiry (now + timeout, in ms) failed its run
            raise InvalidApprovalPolicy(
                f"approval timeout must be > 0 and at most {MAX_TIMEOUT_S:.0f} seconds (ten years; "
                f"none: wait until decided), got {self.timeout_s}"
            )
        if self.on_timeout not in ON_TIMEOUT:
            raise InvalidApprovalPolicy(f"on_timeout must be deny or fail, got {self.on_timeout!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ApprovalPolicy:
        """GORMES_REQUIRE_APPROVAL (names and patterns, comma or space separated),
        GORMES_APPROVAL_TIMEOUT (seconds, or `none`), GORMES_APPROVAL_ON_TIMEOUT
        (deny or fail)."""
        require = tuple(p for p in env.get(REQUIRE_ENV, "").replace(",", " ").split() if p)
        raw = env.get(TIMEOUT_ENV, "").strip()
        timeout: float | None = DEFAULT_TIMEOUT_S
        if raw.lower() == "none":
            timeout = None
        elif raw:
            try:
                timeout = float(raw)
            except ValueError:
                raise InvalidApprovalPolicy(f"{TIMEOUT_ENV} must be seconds or none, got {raw!r}") from None
        on_timeout = env.get(ON_TIMEOUT_ENV, "").strip() or "deny"
        return cls(require=require, timeout_s=timeout, on_timeout=on_timeout)  # type: ignore[arg-type]

    def why(self, spec: OperationSpec) -> str | None:
        """Why a call of `spec` needs approval, or None when it does not. The
        approval operations themselves never do: they are how a request is decided."""
        if spec.name in DECIDING:
            return None
        if spec.requires_approval:
            return f"{spec.name} requires approval (its operation spec)"
        for pattern in self.require:
            if fnmatch.fnmatchcase(spec.name, pattern):
                return f"{spec.name} requires approval here (deployment rule {pattern!r})"
        return None


def refusal(decided: RunApprovalDecided) -> str | None:
    """What a decision makes of the call: None (approved: it runs), the text of a
    denied tool call, or `ApprovalTimedOut` raised (timed out under `fail`). The
    same for the live run and its replay: built from the recorded decision only."""
    if decided.decision == "approved":
        return None
    reason = f": {decided.reason}" if decided.reason else ""
    if decided.decision == "denied":
        return f"approval {decided.approval_id} denied by {decided.by}{reason}"
    if decided.on_timeout == "fail":
        raise ApprovalTimedOut(f"approval {decided.approval_id} timed out with no decision: the run fails")
    return f"approval {decided.approval_id} timed out with no decision: denied"


class ApprovalGate:
    """The gate a run's tool calls pass (one per RunManager)."""

    def __init__(self, store: EventStore, policy: ApprovalPolicy, *, clock: Callable[[], float],
                 ids: Callable[[], str]) -> None:
        self.store = store
        self.policy = policy
        self.clock = clock
        self.ids = ids

    def _now(self) -> int:
        return int(self.clock() * 1000)

    async def gate(self, ctx: LiveRunContext, spec: OperationSpec, args_text: str, args_hash: str) -> str | None:
        """None: the call may run. A text: it is refused (a denied tool call).
        Raises `ApprovalTimedOut` under the `fail` policy."""
        operation = spec.name
        approval_id = ctx.approvals_waiting.pop((operation, args_hash), None)
        if approval_id is not None:  # a resumed run (a fork): the request is in its replayed prefix
            # (a decision that served another run's call already is not claimed below: asked again)
            request = (await _approval(self.store, approval_id)).request
        else:
            why = self.policy.why(spec)
            if why is None:
                return None
            request = await self._request(ctx, operation, args_text, args_hash, why)
        while True:
            decision = await self._decision(ctx, request)
            claimed = request.approval_id
            decided = await ctx.record_observation_if(
                lambda seq: RunApprovalDecided(
                    seq=seq, approval_id=claimed, decision=decision.decision, by=decision.by,
                    reason=decision.reason, on_timeout=request.on_timeout, at=decision.at,
                ),
                lambda tx: claim_in(tx, self._now(), claimed, ctx.run_id),
            )
            if decided is not None:
                return refusal(decided)  # type: ignore[arg-type]
            # another run's call (a fork waiting on the same request) used the decision first
            approval = await _approval(self.store, claimed)
            request = await self._request(ctx, operation, args_text, args_hash, asked_again(approval))

    async def gate_call(self, caller: Caller, spec: OperationSpec, value: Any) -> str | None:
        """The gate of a call made outside any run (an MCP client's; the executor's
        `approvals`, called once the caller's class and the input are checked): None,
        the call may run; a text, it is refused. The request (`approval.requested`,
        no run) and its audit event are one transaction; the call then waits in this
        process for the decision or the timeout. There is no run to fail, so a
        timeout denies the call under either policy."""
        why = self.policy.why(spec)
        if why is None:
            return None
        args_text, args_hash = canonical_arguments(msgspec.to_builtins(value))
        now, policy = self._now(), self.policy
        request = ApprovalRequested(
            approval_id=self.ids(), operation=spec.name, arguments=args_text, args_hash=args_hash,
            run_id=None, job_id=caller.job_id, caller=caller.id, trust=caller.trust, why=why,
            timeout_s=policy.timeout_s, on_timeout=policy.on_timeout,
            expires_at=None if policy.timeout_s is None else now + int(policy.timeout_s * 1000), at=now,
        )
        with trio.CancelScope(shield=True):
            await append_sealed(self.store, _request_audit(caller, args_hash, now),
                                [AppendRequest(APPROVALS_STREAM, [request])])
        decision = await self.wait(request)
        if decision.decision == "approved":
            return None
        reason = f": {decision.reason}" if decision.reason else ""
        if decision.decision == "denied":
            return f"approval {request.approval_id} denied by {decision.by}{reason}"
        return f"approval {request.approval_id} timed out with no decision: denied"

    async def _request(self, ctx: LiveRunContext, operation: str, args_text: str, args_hash: str,
                       why: str) -> ApprovalRequested:
        now, policy, caller = self._now(), self.policy, ctx.caller
        approval_id = self.ids()
        request = ApprovalRequested(
            approval_id=approval_id, operation=operation, arguments=args_text, args_hash=args_hash,
            run_id=ctx.run_id, job_id=caller.job_id, caller=caller.id, trust=caller.trust, why=why,
            timeout_s=policy.timeout_s, on_timeout=policy.on_timeout,
            expires_at=None if policy.timeout_s is None else now + int(policy.timeout_s * 1000), at=now,
        )
        await ctx.record_observation(
            lambda seq: RunApprovalRequested(seq=seq, approval_id=approval_id, operation=operation,
                                             args_hash=args_hash, why=why),
            audit=_request_audit(caller, args_hash, now), also=[AppendRequest(APPROVALS_STREAM, [request])],
        )
        return request

    async def _decision(self, ctx: LiveRunContext, request: ApprovalRequested) -> ApprovalDecided:
        job = ctx.holding_job  # a subagent's call parks the job its root run is the attempt of
        if job is not None:
            approval_id = request.approval_id
            with trio.CancelScope(shield=True):
                await job.flush_tokens()  # what the job is owed, while the lease it gives up holds
                looked = await park(
                    self.store, self._now(), job.id, job.lock_token, on=approval_key(approval_id),
                    why=f"waiting for approval {approval_id} of {request.operation} "
                        f"(gormes approve {approval_id} --reason ...)",
                    decided=lambda tx: _decided_or_none(decision_in(tx, self._now(), approval_id)),
                )
            if looked is not None:
                decision, recorded_now = looked
                if recorded_now:
                    with trio.CancelScope(shield=True):
                        await audit_timeout(self.store, decision, request)
                return decision
            # Parked: the worker sees the pause and cancels this attempt; the decision
            # resumes the job, whose next attempt resumes this run from its record.
            await trio.sleep_forever()
        return await self.wait(request)

    async def wait(self, request: ApprovalRequested) -> ApprovalDecided:
        """Wait in this process for the request's decision (or time it out)."""
        store, seen = self.store, -1
        while True:
            generation = store.generation
            version = await store.stream_version(APPROVALS_STREAM)
            if version != seen:
                seen = version
                approval = await read_approval(store, request.approval_id)
                if approval is not None and approval.decision is not None:
                    return approval.decision
            left = math.inf if request.expires_at is None else request.expires_at / 1000 - self.clock()
            if left <= 0:
                with trio.CancelScope(shield=True):
                    decision = await expire(store, self._now(), request.approval_id)
                if decision is not None:
                    return decision
                left = 0.05  # pragma: no cover - the clock said due, the stream not yet
            with trio.move_on_after(left):
                await store.wait_for_change(generation)


async def _approval(store: EventStore, approval_id: str) -> Approval:
    approval = await read_approval(store, approval_id)
    if approval is None:  # pragma: no cover - its request is in the run's record
        raise KeyError(approval_id)
    return approval


def asked_again(approval: Approval) -> str:
    """Why a request is made again: the recorded one's decision served another run."""
    return (f"{approval.request.why}; asked again: approval {approval.request.approval_id}"
            f" served run {approval.used_by}")


def _request_audit(caller: Caller, args_hash: str, now: int) -> AppendRequest:
    """The audit event of an approval's request (outcome ok: the request is made)."""
    return AppendRequest(audit_stream(now), [OperationAudited(
        operation="approval.request", audit_kind="approval.write", caller=caller.id, trust=caller.trust,
        run_id=caller.run_id, job_id=caller.job_id, allowed=True, outcome="ok", duration_ms=0.0,
        input_sha256=args_hash, mutating=True, at=now,
    )])


def _decided_or_none(looked: tuple[ApprovalDecided | None, bool]) -> tuple[ApprovalDecided, bool] | None:
    return None if looked[0] is None else looked  # type: ignore[return-value]


def _next_request(ctx: ReplayContext, operation: str, args_hash: str) -> RunApprovalRequested | None:
    """The next recorded observation, if it is a request of the same call."""
    observations = ctx.recorded.observations
    if ctx.cursor >= len(observations):
        return None
    event = observations[ctx.cursor].event
    if isinstance(event, RunApprovalRequested) and event.operation == operation and event.args_hash == args_hash:
        return event
    return None


async def replay_gate(ctx: ReplayContext, operation: str, args_hash: str) -> str | None:
    """Serve a recorded approval before the call it gated: its request and decision
    (a fork copies both). None: go on serving the call's own record (or raise
    `ApprovalTimedOut` as the run did). The approval id: the recording ends
    before the decision (a resumed run's prefix), and the live part must wait for it."""
    record = await ctx.take(
        lambda: f"approval of tool {operation}",
        lambda e: isinstance(e, RunApprovalRequested) and e.operation == operation and e.args_hash == args_hash,
    )
    if record is None:  # pragma: no cover - the caller peeked a request
        return None
    if ctx.copies:
        await ctx.served(record)
    approval_id = record.event.approval_id  # type: ignore[union-attr]
    while (again := _next_request(ctx, operation, args_hash)) is not None:  # asked again (`asked_again`)
        record = await ctx.take(f"approval of tool {operation}, asked again", lambda e: e is again)
        if record is None:  # pragma: no cover - peeked just now
            return approval_id
        if ctx.copies:
            await ctx.served(record)
        approval_id = again.approval_id
    decided = await ctx.take(
        f"decision on approval {approval_id}",
        lambda e: isinstance(e, RunApprovalDecided) and e.approval_id == approval_id,
    )
    if decided is None:
        return approval_id
    if ctx.copies:
        await ctx.served(decided)
    refusal(decided.event)  # type: ignore[arg-type]  # raises as the live run did under `fail`
    return None

