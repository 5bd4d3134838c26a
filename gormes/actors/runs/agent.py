"""The built-in agent loop, run handler "agent".

Input: {"prompt": str, "system": str?, "max_iterations": int?}. Each iteration:
unread inbox messages become user messages, then one model turn with the run's
tools (plus `agent.spawn` while the depth cap allows a subagent); tool calls run
and their results go back as tool messages; a reply without tool calls is the
final answer. All `agent.spawn` calls of one turn start together, then the loop
takes each call's result in the order the model made the calls.

Everything goes through `ctx`, so a recorded agent run replays exactly.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gormes.providers.base import Message, ModelRequest, ToolCall, ToolSpec
from gormes.actors.runs.context import (
    ChildRun,
    RunContext,
    RunHandlerRegistry,
    SpawnRefused,
    ToolCallFailed,
    run_handler,
    run_handlers,
)
from gormes.errors import GormesError, UserError
from gormes.events.runs import InboxItem

__all__ = ["SPAWN_TOOL", "AgentInput", "MaxIterationsReached", "agent", "registry"]

DEFAULT_MAX_ITERATIONS = 10
SPAWN_TOOL_NAMES = ("agent.spawn", "agent__spawn")

# The registry replay looks handlers up in (`registry.get(name)`), same as run_handlers.
registry: RunHandlerRegistry = run_handlers


class AgentInput(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    prompt: str
    system: str | None = None
    max_iterations: int | None = None
    # Chosen when the run starts (they are recorded in run.started); accepted here
    # so that the same JSON can be given to `gormes run` and to the `agent` job.
    model: str | None = None
    tools: list[str] | None = None


class SpawnArguments(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    prompt: str
    system: str | None = None
    tools: list[str] | None = None
    max_iterations: int | None = None


class MaxIterationsReached(GormesError):
    """The agent made `max_iterations` model turns without a final answer."""


SPAWN_TOOL = ToolSpec(
    name="agent.spawn",
    description="Start a subagent on a task and get its final answer. Calls made in the "
    "same turn run concurrently.",
    parameters={
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "The subagent's task."},
            "system": {"type": "string", "description": "Its system prompt (optional)."},
            "tools": {"type": "array", "items": {"type": "string"},
                      "description": "Tools it may use; at most yours (optional)."},
            "max_iterations": {"type": "integer", "minimum": 1},
        },
        "required": ["prompt"],
    },
)


@run_handler("agent", needs_model=True)
async def agent(ctx: RunContext, input: Any) -> str:
    try:
        task = msgspec.convert(input, AgentInput)
    except msgspec.ValidationError as exc:
        raise UserError(f"agent input: {exc}") from None
    limit = iteration_limit(task.max_iterations, ctx.max_iterations)
    tools = ctx.tool_schemas()
    if ctx.depth < ctx.max_depth:
        tools = (*tools, SPAWN_TOOL)
    messages: list[Message] = []
    if task.system:
        messages.append(Message(role="system", content=task.system))
    messages.append(Message(role="user", content=task.prompt))

    for _ in range(limit):
        messages.extend(inbox_message(m) for m in await ctx.inbox())
        request = ModelRequest(model=ctx.model_name, messages=tuple(messages), tools=tools)
        reply = await ctx.llm(request)
        messages.append(reply.message)
        calls = reply.message.tool_calls
        if not calls:
            return reply.message.content
        messages.extend(await run_tool_calls(ctx, calls, limit))
    raise MaxIterationsReached("max iterations reached")


def iteration_limit(asked: int | None, run_cap: int | None) -> int:
    """The input's `max_iterations` within the run's own (recorded in `run.started`:
    what its starter allowed, and a subagent's parent's cap): the smaller of the two
    that are given, else the default."""
    given = [n for n in (asked, run_cap) if n is not None]
    return min(given) if given else DEFAULT_MAX_ITERATIONS


async def run_tool_calls(ctx: RunContext, calls: tuple[ToolCall, ...], limit: int) -> list[Message]:
    """Start every spawn first, then answer each call in the model's order.
    `limit`: this agent's own iterations, which no subagent it starts may exceed."""
    children: dict[str, ChildRun | str] = {}
    for call in calls:
        if call.name in SPAWN_TOOL_NAMES:
            children[call.id] = await start_subagent(ctx, call, limit)
    answers: list[Message] = []
    for call in calls:
        if call.name in SPAWN_TOOL_NAMES:
            child = children[call.id]
            text = child if isinstance(child, str) else await subagent_answer(child)
        else:
            try:
                text = msgspec.json.encode(await ctx.tool(call.name, call.arguments)).decode()
            except ToolCallFailed as exc:
                text = f"error ({exc.outcome}): {exc.message}"
        answers.append(Message(role="tool", content=text, tool_call_id=call.id, name=call.name))
    return answers


async def start_subagent(ctx: RunContext, call: ToolCall, limit: int) -> ChildRun | str:
    """The child run, or the error text the model is shown instead. The child may
    make at most `limit` model turns (its parent's), whatever the model asked."""
    try:
        args = msgspec.json.decode(call.arguments, type=SpawnArguments)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        await ctx.spawn_invalid(call.arguments, f"invalid agent.spawn arguments: {exc}")
        return f"error: invalid agent.spawn arguments: {exc}"
    child_input: dict[str, Any] = {"prompt": args.prompt}
    if args.system is not None:
        child_input["system"] = args.system
    if args.max_iterations is not None:  # without it the child has its run's cap, its parent's
        child_input["max_iterations"] = min(args.max_iterations, limit)
    try:
        return await ctx.spawn("agent", child_input, tools=args.tools)
    except SpawnRefused as exc:
        return f"error: {exc}"


async def subagent_answer(child: ChildRun) -> str:
    outcome = await child.result()
    if outcome.status == "completed":
        result = outcome.result
        return result if isinstance(result, str) else msgspec.json.encode(result).decode()
    return f"error: subagent {outcome.run_id} {outcome.status}: {outcome.error}"


def inbox_message(item: InboxItem) -> Message:
    payload = item.payload
    text = payload if isinstance(payload, str) else msgspec.json.encode(payload).decode()
    return Message(role="user", content=f"[message from {item.sender}] {text}")
