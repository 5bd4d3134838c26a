"""Run handlers used by some replay fixtures (besides the built-in "agent").

Import this module (`gormes replay --import replay_fixtures/handlers.py`) before
replaying a fixture that names one of them. They touch the world only through
`ctx`, so their runs replay exactly.
"""

from __future__ import annotations

from typing import Any

import trio

from gormes.actors.runs.agent import agent
from gormes.actors.runs.context import RunContext, run_handler

POLL_S = 0.01


async def wait_for_word(ctx: RunContext, word: str) -> int:
    """Read the inbox until a message says `word`; returns how many reads it took.
    (The sleep between reads reads no clock: only the recorded reads matter.)"""
    reads = 0
    while True:
        reads += 1
        if any(m.payload == word for m in await ctx.inbox()):
            return reads
        await trio.sleep(POLL_S)


@run_handler("fixture.wait_then_agent")
async def wait_then_agent(ctx: RunContext, input: Any) -> Any:
    """Wait for the inbox word input["word"], then run the agent loop on input["agent"]."""
    await ctx.log(f"waiting for {input['word']!r}")
    await wait_for_word(ctx, input["word"])
    return await agent(ctx, input["agent"])


@run_handler("fixture.cancel_child")
async def cancel_child(ctx: RunContext, input: Any) -> Any:
    """Use every kind of observation, spawn a child that waits forever, cancel it."""
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
    return {
        "child": outcome.status,
        "started": started,
        "draw": draw,
        "readme_bytes": readme["size"],
    }
