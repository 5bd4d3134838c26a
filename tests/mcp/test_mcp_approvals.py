"""An MCP client's call of an operation that needs a person's approval passes the
same gate as a run's call (an attacker's finding: the gate was only in the run's
path, so a gateway client ran `requires_approval` operations, and those the
deployment's GORMES_REQUIRE_APPROVAL names, at once, with nobody asked). The call
now waits for `gormes approve|deny` or the timeout; a refusal is an error result,
audited as denied, and the operation never runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio
from mcp_helpers import audit_events, call_ok, call_refused, gormes_mcp

from gormes.actors.runs.approval_book import read_approvals

PAYMENTS = '''
import os
import msgspec
import gormes


class PayIn(msgspec.Struct, forbid_unknown_fields=True):
    to: str
    amount: int


class PayOut(msgspec.Struct):
    sent: bool


@gormes.operation("payments.send", trust=["operator", "gateway"], mutating=True, requires_approval=True)
async def send(ctx: gormes.OperationContext, input: PayIn) -> PayOut:
    """Send money (a person approves each call)."""
    with open(os.environ["PAYMENTS_LOG"], "a") as f:
        f.write(f"{input.amount} to {input.to} by {ctx.caller.trust}:{ctx.caller.id}\\n")
    return PayOut(sent=True)
'''


def payments(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    module = tmp_path / "payments.py"
    module.write_text(PAYMENTS)
    log = tmp_path / "payments.log"
    return module, log, {"PAYMENTS_LOG": str(log)}


async def pending_request(store: Any) -> Any:
    """The one pending approval request, once it is in the log."""
    with trio.fail_after(60):  # a hang guard, not a timing assertion
        while True:
            pending = [a for a in (await read_approvals(store)).values() if a.pending]
            if pending:
                assert len(pending) == 1, pending
                return pending[0].request
            await trio.sleep(0.05)


async def decide(db: Path, verb: str, approval_id: str, reason: str) -> None:
    done = await trio.run_process(
        [sys.executable, "-m", "gormes", "--db", str(db), verb, approval_id, "--reason", reason],
        capture_stdout=True, capture_stderr=True, check=False,
    )
    assert done.returncode == 0, done.stderr


async def test_a_gated_call_waits_for_the_approval_and_then_runs(db_path: Path, store, tmp_path: Path):
    module, log, env = payments(tmp_path)
    outcome: dict[str, Any] = {}
    async with gormes_mcp(db_path, "--import", str(module), env=env) as client:

        async def pay() -> None:
            outcome["paid"] = await call_ok(client, "payments__send", to="bob", amount=5)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pay)
            request = await pending_request(store)
            assert not log.exists()  # nothing runs before the decision
            # the server goes on serving other calls while one waits
            assert "iso" in await call_ok(client, "time__now")
            await decide(db_path, "approve", request.approval_id, "bob is known")
    assert outcome["paid"] == {"sent": True}
    assert log.read_text() == "5 to bob by gateway:mcp:gormes-tests\n"
    assert (request.operation, request.run_id, request.caller, request.trust) == (
        "payments.send", None, "mcp:gormes-tests", "gateway")
    assert json.loads(request.arguments) == {"amount": 5, "to": "bob"}
    assert "requires approval (its operation spec)" in request.why
    audited = [(e.operation, e.caller, e.outcome) for e in await audit_events(store)]
    assert audited[:2] == [("approval.request", "mcp:gormes-tests", "ok"), ("time.now", "mcp:gormes-tests", "ok")]
    # the approval's record and the paid call's, in whichever order the two processes committed them
    assert sorted(audited[2:]) == [("approval.approve", "cli", "ok"), ("payments.send", "mcp:gormes-tests", "ok")]


async def test_a_denied_call_is_an_error_result_audited_as_denied(db_path: Path, store, tmp_path: Path):
    module, log, env = payments(tmp_path)
    outcome: dict[str, Any] = {}
    async with gormes_mcp(db_path, "--import", str(module), env=env) as client:

        async def pay() -> None:
            outcome["refused"] = await call_refused(client, "payments__send", to="mallory", amount=10**6)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pay)
            request = await pending_request(store)
            await decide(db_path, "deny", request.approval_id, "not to mallory")
    assert outcome["refused"] == (
        f"ApprovalDenied: approval {request.approval_id} denied by operator:cli: not to mallory")
    assert not log.exists()
    [paid] = [e for e in await audit_events(store) if e.operation == "payments.send"]
    assert (paid.outcome, paid.allowed, paid.caller) == ("denied", False, "mcp:gormes-tests")
    assert paid.error.startswith("ApprovalDenied: approval")


async def test_the_deployments_rule_gates_a_built_in_and_its_timeout_denies(db_path: Path, store):
    env = {"GORMES_REQUIRE_APPROVAL": "memory.remember", "GORMES_APPROVAL_TIMEOUT": "0.5",
           "GORMES_APPROVAL_ON_TIMEOUT": "fail"}  # no run to fail: a call outside one is denied
    async with gormes_mcp(db_path, env=env) as client:
        refused = await call_refused(client, "memory__remember", fact="the vault code is 1234")
        # input that does not validate is refused as such, and no one is asked
        invalid = await call_refused(client, "memory__remember", nonsense=1)
    assert refused.startswith("ApprovalDenied: approval ") and refused.endswith("timed out with no decision: denied")
    assert invalid.startswith("InvalidOperationInput")
    approvals = list((await read_approvals(store)).values())
    assert [(a.status, a.request.operation) for a in approvals] == [("timed_out", "memory.remember")]
    assert "deployment rule 'memory.remember'" in approvals[0].request.why
    assert not [r for r in await store.read_all(types=["memory.*"])]
    audited = [(e.operation, e.outcome) for e in await audit_events(store)]
    assert audited[0] == ("approval.request", "ok") and audited[-2:] == [
        ("memory.remember", "denied"), ("memory.remember", "invalid")]


async def test_an_operators_client_decides_and_its_own_deciding_is_never_gated(db_path: Path, store, tmp_path: Path):
    module, log, env = payments(tmp_path)
    operator_env = {"GORMES_REQUIRE_APPROVAL": "*"}  # every operation but the deciding ones
    outcome: dict[str, Any] = {}
    async with gormes_mcp(db_path, "--import", str(module), env=env) as gateway, \
            gormes_mcp(db_path, "--trust", "operator", env=operator_env, client_name="ops-desk") as operator:

        async def pay() -> None:
            outcome["paid"] = await call_ok(gateway, "payments__send", to="bob", amount=7)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pay)
            request = await pending_request(store)
            listed = await call_ok(operator, "approval__list")
            assert [a["id"] for a in listed["approvals"]] == [request.approval_id]
            decided = await call_ok(operator, "approval__approve", id=request.approval_id, reason="ok")
    assert decided["status"] == "approved" and decided["decided_by"] == "operator:mcp:ops-desk"
    assert decided["run_id"] is None
    assert outcome["paid"] == {"sent": True} and log.read_text().startswith("7 to bob")
