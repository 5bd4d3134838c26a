"""The operator's approval and budget tools over MCP (decision 0037): served by
`gormes mcp --trust operator` only, decided and raised through the audited
executor; a gateway or child-agent server neither lists nor runs them, each
refusal audited, nothing changed; no model's tool list ever holds them."""

from __future__ import annotations

import pytest
from mcp_helpers import CLIENT_NAME, audit_events, call_ok, call_refused, gormes_mcp, tool_names

from gormes.actors.runs.approval_book import read_approvals
from gormes.control.budget_book import BudgetBook
from gormes.events.approvals import APPROVALS_STREAM, ApprovalRequested
from gormes.ops.registry import wire_name
from gormes.tools.builtin import default_registry

OPERATOR_TOOLS = {"approval__list", "approval__approve", "approval__deny", "budget__show", "budget__list",
                  "budget__raise"}


async def request_approval(store, approval_id: str) -> None:
    """A pending request, as a run's call of an operation that needs approval records it."""
    await store.append(APPROVALS_STREAM, [ApprovalRequested(
        approval_id=approval_id, operation="shell.run", arguments='{"command":"make deploy"}',
        args_hash="h", run_id="R1", caller="run-R1", trust="operator", why="deployment rule 'shell.*'", at=1,
    )])


def test_the_flag_is_on_exactly_the_operator_tools_and_no_model_is_offered_them():
    registry = default_registry()
    flagged = {wire_name(s.name) for s in registry.list() if s.operator_mcp}
    assert flagged == OPERATOR_TOOLS
    for trust in ("operator", "gateway", "child-agent", "system"):
        offered = {wire_name(t.name) for t in registry.tool_schemas(trust)}
        assert not offered & OPERATOR_TOOLS, trust
    assert all(not s.prompt_visible for s in registry.list() if s.operator_mcp)


async def test_an_operator_client_lists_approves_and_raises_audited_as_itself(db_path, store):
    await request_approval(store, "A1")
    await request_approval(store, "A2")
    await BudgetBook(store).set("team", tokens=1000)
    async with gormes_mcp(db_path, "--trust", "operator") as client:
        names = await tool_names(client)
        listed = await call_ok(client, "approval__list")
        approved = await call_ok(client, "approval__approve", id="A1", reason="looked at the diff")
        denied = await call_ok(client, "approval__deny", id="A2", reason="not on a Friday")
        again = await call_refused(client, "approval__approve", id="A1", reason="twice")
        raised = await call_ok(client, "budget__raise", id="team", by=500)
        shown = await call_ok(client, "budget__show", id="team")
        budgets = await call_ok(client, "budget__list")
        shell = await call_refused(client, "shell__run", command="true")
        setting = await call_refused(client, "budget__set", id="team", tokens=10)
    assert OPERATOR_TOOLS <= names
    assert "shell__run" not in names and "budget__set" not in names
    assert [a["id"] for a in listed["approvals"]] == ["A2", "A1"]
    by = f"operator:mcp:{CLIENT_NAME}"
    assert (approved["status"], approved["decided_by"], approved["reason"]) == ("approved", by, "looked at the diff")
    assert (denied["status"], denied["decided_by"]) == ("denied", by)
    assert again.startswith("ApprovalNotPending: approval A1 is not pending: approved by " + by)
    assert raised["tokens_cap"] == 1500 and shown["tokens_cap"] == 1500
    assert [b["id"] for b in budgets["budgets"]] == ["team"]
    assert shell.startswith("UnknownOperation") and setting.startswith("UnknownOperation")

    decided = await read_approvals(store)
    assert (decided["A1"].status, decided["A2"].status) == ("approved", "denied")
    audited = [(e.operation, e.outcome, e.trust, e.caller) for e in await audit_events(store)]
    mcp = f"mcp:{CLIENT_NAME}"
    assert audited == [
        ("approval.list", "ok", "operator", mcp), ("approval.approve", "ok", "operator", mcp),
        ("approval.deny", "ok", "operator", mcp), ("approval.approve", "invalid", "operator", mcp),
        ("budget.raise", "ok", "operator", mcp), ("budget.show", "ok", "operator", mcp),
        ("budget.list", "ok", "operator", mcp), ("shell__run", "denied", "operator", mcp),
        ("budget__set", "denied", "operator", mcp),
    ]


@pytest.mark.parametrize("trust", ["gateway", "child-agent", "system"])
async def test_any_other_client_neither_sees_nor_calls_them_and_each_refusal_is_audited(db_path, store, trust):
    await request_approval(store, "A1")
    await BudgetBook(store).set("team", tokens=1000)
    async with gormes_mcp(db_path, "--trust", trust) as client:
        names = await tool_names(client)
        refusals = [
            await call_refused(client, "approval__approve", id="A1", reason="let me through"),
            await call_refused(client, "approval__deny", id="A1", reason="no"),
            await call_refused(client, "approval__list"),
            await call_refused(client, "budget__raise", id="team", by=10_000),
            await call_refused(client, "budget__show", id="team"),
        ]
    assert not names & OPERATOR_TOOLS
    assert all(r.startswith("UnknownOperation") for r in refusals), refusals
    assert (await read_approvals(store))["A1"].pending
    assert (await BudgetBook(store).get("team")).tokens_cap == 1000
    events = await audit_events(store)
    assert [(e.operation, e.outcome, e.allowed, e.trust) for e in events] == [
        (name, "denied", False, trust)
        for name in ("approval__approve", "approval__deny", "approval__list", "budget__raise", "budget__show")
    ]
