"""`gormes mcp --import FILE` serves a user's operation beside the built-ins, to
the trust classes it allows, under its wire name, audited like any call."""

from __future__ import annotations

from pathlib import Path

from mcp_helpers import audit_events, call_ok, call_refused, gormes_mcp, tool_names

TOOLS = '''
import msgspec
import gormes


class In(msgspec.Struct, forbid_unknown_fields=True):
    city: str


class Out(msgspec.Struct):
    city: str
    celsius: float


@gormes.operation("weather.get", trust=["operator", "gateway"], description="The temperature in a city.")
async def weather(ctx: gormes.OperationContext, input: In) -> Out:
    return Out(city=input.city, celsius=12.5)


@gormes.operation("weather.private")
async def private(ctx: gormes.OperationContext, input: In) -> Out:
    """Not for gateways (the default trust classes leave them out)."""
    return Out(city=input.city, celsius=0.0)
'''


async def test_an_imported_operation_is_served_and_audited(db_path: Path, store, tmp_path: Path):
    tools = tmp_path / "mcp_tools.py"
    tools.write_text(TOOLS)
    async with gormes_mcp(db_path, "--import", str(tools)) as client:
        names = await tool_names(client)
        listed = {t.name: t for t in (await client.list_tools()).tools}
        served = await call_ok(client, "weather__get", city="Oslo")
        refused = await call_refused(client, "weather__private", city="Oslo")
    assert "weather__get" in names and "weather__private" not in names and "time__now" in names
    assert listed["weather__get"].title == "weather.get"
    assert listed["weather__get"].input_schema["required"] == ["city"]
    assert served == {"city": "Oslo", "celsius": 12.5}
    assert refused.startswith("UnknownOperation")
    events = await audit_events(store)
    assert [(e.operation, e.outcome) for e in events] == [("weather.get", "ok"), ("weather__private", "denied")]

    async with gormes_mcp(db_path, "--trust", "child-agent", "--import", str(tools)) as client:
        assert {"weather__get", "weather__private"} & await tool_names(client) == {"weather__private"}
