"""A user's own tool and agent loop, loaded with `--import examples/trip.py`.

    gormes run trip --import examples/trip.py --model scripted:examples/trip_script.json \
        --input '{"km": 120, "city": "Lyon"}' [--mcp-config examples/mcp-servers.json]
    gormes replay RUN --import examples/trip.py

`units.convert` is an operation like the built-in ones: the executor checks the
caller's trust class, validates the input, enforces the timeout and audits the
call; a model is offered it; a run records each call and replay serves it back.
`trip` is a run handler: everything it learns (the tool's result, the local time
from the reference MCP server `mcp-server-time` when `--mcp-config` names it, the
subagent's answer, the operator's messages, the model's reply) comes through
`ctx`, so a recorded run replays exactly, with no server and no network.
"""

from __future__ import annotations

from typing import Literal

import msgspec

import gormes
from gormes.providers import Message, ModelRequest

KM_PER_MILE = 1.609344


class Convert(msgspec.Struct, frozen=True, kw_only=True):
    value: float
    to: Literal["km", "mi"]


class Converted(msgspec.Struct, frozen=True, kw_only=True):
    value: float
    unit: Literal["km", "mi"]


@gormes.operation("units.convert", trust=["operator", "system", "child-agent"], timeout=5.0)
async def convert(ctx: gormes.OperationContext, input: Convert) -> Converted:
    """Convert a distance to kilometres (to="km") or miles (to="mi")."""
    factor = KM_PER_MILE if input.to == "km" else 1 / KM_PER_MILE
    return Converted(value=round(input.value * factor, 1), unit=input.to)


class Trip(msgspec.Struct, frozen=True, kw_only=True):
    km: float
    city: str


@gormes.run_handler("trip")
async def trip(ctx: gormes.RunContext, input: object) -> str:
    plan = msgspec.convert(input, Trip)
    # a tool, through the executor with the run's trust class
    miles = await ctx.tool("units.convert", {"value": plan.km, "to": "mi"})
    # a tool of an external MCP server, when one is configured
    local_time = "unknown"
    if "mcp.time.get_current_time" in {tool.name for tool in ctx.tool_schemas()}:
        now = await ctx.tool("mcp.time.get_current_time", {"timezone": "Europe/Paris"})
        local_time = now["structured"]["datetime"]
    # a subagent (the built-in agent loop) in this run's nursery, on the same model
    scout = await ctx.spawn("agent", {"prompt": f"Role: scout. One sight worth a stop near {plan.city}."})
    sight = await scout.result()
    # what an operator sent meanwhile (`gormes runs send RUN --payload JSON`)
    notes = [str(m.payload) for m in await ctx.inbox()]
    prompt = (f"Plan a {miles['value']} mile drive to {plan.city}, leaving at {local_time}. "
              f"A scout suggests: {sight.result}. "
              + (f"Operator notes: {'; '.join(notes)}" if notes else "No operator notes."))
    reply = await ctx.llm(ModelRequest(model=ctx.model_name, messages=(
        Message(role="system", content="Role: planner. Answer in one sentence."),
        Message(role="user", content=prompt),
    )))
    return reply.message.content
