"""Which tools `gormes mcp` offers, to which trust class, and the refused call."""

from __future__ import annotations

from mcp_helpers import CLIENT_NAME, audit_events, call_refused, gormes_mcp, tool_names

from gormes.tools.builtin import default_registry
from gormes.ops.registry import wire_name

STEERING = {
    "job__submit", "job__get", "job__list", "job__send", "job__inbox", "job__pause", "job__resume",
    "job__cancel", "run__submit", "run__get", "run__list", "run__timeline", "run__send",
}


def served(trust: str) -> set[str]:
    return {wire_name(spec.name) for spec in default_registry().list(trust=trust, prompt_visible=True)}


async def test_a_gateway_client_is_offered_the_prompt_visible_operations_and_no_operator_only_one(db_path):
    async with gormes_mcp(db_path) as client:
        listing = (await client.list_tools()).tools
    names = {tool.name for tool in listing}
    assert names == served("gateway")
    assert STEERING <= names
    operator_only = {wire_name(s.name) for s in default_registry().list() if s.operator_only}
    assert "shell__run" in operator_only and not names & operator_only
    tools = {tool.name: tool for tool in listing}
    submit = tools["run__submit"]
    assert submit.title == "run.submit"
    assert submit.input_schema["required"] == ["prompt"]
    assert submit.annotations.read_only_hint is False
    assert tools["job__get"].annotations.read_only_hint is True


async def test_the_trust_class_is_configurable_and_narrows_the_tools(db_path, store):
    async with gormes_mcp(db_path, "--trust", "child-agent") as client:
        names = await tool_names(client)
        refused = await call_refused(client, "job__pause", id="no-such-job")
    assert names == served("child-agent")
    assert {"job__cancel", "job__pause", "run__submit", "run__timeline"}.isdisjoint(names)
    assert "job__get" in names
    assert refused.startswith("UnknownOperation")
    (denied,) = await audit_events(store)
    assert (denied.trust, denied.outcome, denied.allowed) == ("child-agent", "denied", False)


async def test_an_operator_only_operation_called_by_name_is_refused_and_audited_as_denied(db_path, store):
    async with gormes_mcp(db_path) as client:
        by_wire_name = await call_refused(client, "shell__run", command="touch pwned")
        by_dotted_name = await call_refused(client, "shell.run", command="touch pwned")
    assert by_wire_name == "UnknownOperation: unknown operation 'shell__run'"
    assert by_dotted_name == "UnknownOperation: unknown operation 'shell.run'"
    events = await audit_events(store)
    assert [(e.operation, e.outcome, e.allowed) for e in events] == [
        ("shell__run", "denied", False), ("shell.run", "denied", False),
    ]
    assert {(e.caller, e.trust) for e in events} == {(f"mcp:{CLIENT_NAME}", "gateway")}


async def test_an_operator_trust_server_serves_no_operator_only_operation_but_the_operator_mcp_ones(db_path, store):
    async with gormes_mcp(db_path, "--trust", "operator") as client:
        names = await tool_names(client)
        refused = await call_refused(client, "shell__run", command="true")
    operator_mcp = {wire_name(s.name) for s in default_registry().list() if s.operator_mcp}
    assert names == served("operator") | operator_mcp  # approvals and budgets: decision 0037
    assert "shell__run" not in names
    assert refused.startswith("UnknownOperation")
    (denied,) = await audit_events(store)
    assert (denied.operation, denied.trust, denied.outcome) == ("shell__run", "operator", "denied")
