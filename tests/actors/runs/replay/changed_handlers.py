"""Copies of fixture handlers changed on purpose: replay must name where they diverge.

Each is registered under the name of the handler it changes, in a registry of its
own, so the recorded runs are replayed with the changed code.
"""

from __future__ import annotations

from typing import Any

from gormes.actors.runs.agent import agent
from gormes.actors.runs.context import (
    RunContext,
    RunHandler,
    RunHandlerRegistry,
    run_handlers,
)


def registry_with(name: str, fn: RunHandler) -> RunHandlerRegistry:
    handlers = run_handlers.copy()
    handlers.register(name, fn)
    return handlers


async def agent_with_another_prompt(ctx: RunContext, input: Any) -> Any:
    """The agent, with a system prompt the recording did not have."""
    return await agent(ctx, {**input, "system": "Answer in one word."})


async def cancel_child_reading_another_file(ctx: RunContext, input: Any) -> Any:
    """fixture.cancel_child reading notes.txt where it read README.md."""
    await ctx.log("starting")
    started = await ctx.now()
    draw = await ctx.random()
    await ctx.progress({"step": 1, "of": 2})
    await ctx.tokens(input=12, output=3)
    child = await ctx.spawn("fixture.wait_then_agent", {"word": "never sent", "agent": {"prompt": "unused"}})
    readme = await ctx.tool("fs.read", {"path": "notes.txt"})
    await child.cancel("not needed any more")
    outcome = await child.result()
    await ctx.progress({"step": 2, "of": 2})
    return {"child": outcome.status, "started": started, "draw": draw, "readme_bytes": readme["size"]}


async def cancel_child_with_an_extra_tool_call(ctx: RunContext, input: Any) -> Any:
    """fixture.cancel_child listing the workspace before reading the README."""
    await ctx.log("starting")
    started = await ctx.now()
    draw = await ctx.random()
    await ctx.progress({"step": 1, "of": 2})
    await ctx.tokens(input=12, output=3)
    child = await ctx.spawn("fixture.wait_then_agent", {"word": "never sent", "agent": {"prompt": "unused"}})
    await ctx.tool("fs.list", {"path": "."})
    readme = await ctx.tool("fs.read", {"path": "README.md"})
    await child.cancel("not needed any more")
    outcome = await child.result()
    await ctx.progress({"step": 2, "of": 2})
    return {"child": outcome.status, "started": started, "draw": draw, "readme_bytes": readme["size"]}


async def cancel_child_that_stops_early(ctx: RunContext, input: Any) -> Any:
    """fixture.cancel_child returning before its last progress report."""
    await ctx.log("starting")
    started = await ctx.now()
    draw = await ctx.random()
    await ctx.progress({"step": 1, "of": 2})
    await ctx.tokens(input=12, output=3)
    child = await ctx.spawn("fixture.wait_then_agent", {"word": "never sent", "agent": {"prompt": "unused"}})
    readme = await ctx.tool("fs.read", {"path": "README.md"})
    await child.cancel("not needed any more")
    outcome = await child.result()
    return {"child": outcome.status, "started": started, "draw": draw, "readme_bytes": readme["size"]}


async def cancel_child_logging_at_the_end(ctx: RunContext, input: Any) -> Any:
    """fixture.cancel_child with one more call after everything it recorded."""
    await ctx.log("starting")
    started = await ctx.now()
    draw = await ctx.random()
    await ctx.progress({"step": 1, "of": 2})
    await ctx.tokens(input=12, output=3)
    child = await ctx.spawn("fixture.wait_then_agent", {"word": "never sent", "agent": {"prompt": "unused"}})
    readme = await ctx.tool("fs.read", {"path": "README.md"})
    await child.cancel("not needed any more")
    outcome = await child.result()
    await ctx.progress({"step": 2, "of": 2})
    await ctx.log("one more thing")
    return {"child": outcome.status, "started": started, "draw": draw, "readme_bytes": readme["size"]}


async def cancel_child_with_another_result(ctx: RunContext, input: Any) -> Any:
    """fixture.cancel_child returning a result the recording does not hold."""
    await ctx.log("starting")
    started = await ctx.now()
    draw = await ctx.random()
    await ctx.progress({"step": 1, "of": 2})
    await ctx.tokens(input=12, output=3)
    child = await ctx.spawn("fixture.wait_then_agent", {"word": "never sent", "agent": {"prompt": "unused"}})
    readme = await ctx.tool("fs.read", {"path": "README.md"})
    await child.cancel("not needed any more")
    outcome = await child.result()
    await ctx.progress({"step": 2, "of": 2})
    return {"child": outcome.status, "started": started, "draw": draw, "readme_bytes": readme["size"] + 1}


async def child_logging_another_message(ctx: RunContext, input: Any) -> Any:
    """fixture.wait_then_agent (the cancelled child) logging other words."""
    await ctx.log(f"now waiting for {input['word']!r}")
    return await agent(ctx, input["agent"])


async def agent_reformatted(ctx: RunContext, input: Any) -> Any:
    # The same behaviour as `agent`, in a function of other source: a new handler version.
    result = await agent(ctx, input)
    return result
