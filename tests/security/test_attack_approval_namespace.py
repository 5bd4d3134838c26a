"""An operation whose name merely starts with `approval.` skipped every approval gate.

`ApprovalPolicy.why` let through any operation named `approval.*`, meaning the
three that list and decide requests (a decision cannot wait for a decision). A
deployment's own operation named, say, `approval.refund`, declared with
`requires_approval=True` (or caught by GORMES_REQUIRE_APPROVAL=*), ran at once
for a gateway over MCP, and for a run's model, with nobody asked. Only the
built-in deciding operations are exempt now, by their exact names.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_helpers import audit_events, call_refused, gormes_mcp

from gormes.actors.runs.approvals import ApprovalPolicy
from gormes.tools.builtin import default_registry

REFUNDS = '''
import os
import msgspec
import gormes


class RefundIn(msgspec.Struct, forbid_unknown_fields=True):
    order: str


class RefundOut(msgspec.Struct):
    refunded: bool


@gormes.operation("approval.refund", trust=["operator", "gateway"], mutating=True, requires_approval=True)
async def refund(ctx: gormes.OperationContext, input: RefundIn) -> RefundOut:
    """Refund an order (a person approves each call)."""
    with open(os.environ["REFUNDS_LOG"], "a") as f:
        f.write(f"refunded {input.order} for {ctx.caller.id}\\n")
    return RefundOut(refunded=True)
'''


async def test_an_operation_named_like_the_deciding_ones_still_waits_for_approval(db_path: Path, store, tmp_path):
    module = tmp_path / "refunds.py"
    module.write_text(REFUNDS)
    log = tmp_path / "refunds.log"
    # No one decides; the request times out under `deny` (the call is refused either way).
    env = {"REFUNDS_LOG": str(log), "GORMES_APPROVAL_TIMEOUT": "0.5", "GORMES_APPROVAL_ON_TIMEOUT": "deny"}
    async with gormes_mcp(db_path, "--import", str(module), env=env) as client:
        line = await call_refused(client, "approval__refund", order="A-1")
    assert "ApprovalDenied" in line, line
    assert not log.exists()
    audited = [(e.operation, e.outcome) for e in await audit_events(store)]
    assert ("approval.refund", "denied") in audited and ("approval.refund", "ok") not in audited


@pytest.mark.parametrize("name", ["approval.list", "approval.approve", "approval.deny"])
def test_the_deciding_operations_themselves_are_never_gated(name: str):
    spec = default_registry().get(name)
    assert spec is not None
    assert ApprovalPolicy(require=("*",)).why(spec) is None
