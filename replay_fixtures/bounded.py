"""A run handler of the replay fixture `timeboxed_turn`: a model turn bounded by a
scope of the handler's own (decision 0080). A module of its own, so that the
handlers of the fixtures recorded before it keep their recorded version.

Import it (`gormes replay --import replay_fixtures/bounded.py`) before replaying
that fixture.
"""

from __future__ import annotations

from typing import Any

import trio

from gormes.actors.runs.context import RunContext, run_handler
from gormes.providers.base import Message, ModelRequest


def _asking(ctx: RunContext, prompt: str) -> ModelRequest:
    return ModelRequest(model=ctx.model_name, messages=(Message(role="user", content=prompt),))


@run_handler("fixture.timeboxed", needs_model=True)
async def timeboxed(ctx: RunContext, input: Any) -> Any:
    """Give the model input["box_s"] for a first answer, then ask a fallback question:
    the turn its own scope cut is recorded (`run.llm_cut`), and replay waits there
    for the scope again."""
    with trio.move_on_after(input["box_s"]):
        return (await ctx.llm(_asking(ctx, f"SLOW {input['prompt']}"))).message.content
    return (await ctx.llm(_asking(ctx, f"FAST {input['prompt']}"))).message.content
