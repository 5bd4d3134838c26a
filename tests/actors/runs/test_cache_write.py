"""Prompt-cache writes a provider reports are recorded with the turn, served back
the same on replay, and a handler may report its own (`ctx.tokens(cache_write=)`)."""

from __future__ import annotations

from gormes.actors.runs.context import RunHandlerRegistry
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.events.runs import RunLlmTurn, RunTokensAdded, run_stream
from gormes.providers.base import Message, ModelReply, ModelRequest, Usage


class Caching:
    name = "stub:caching"
    model = "caching"

    async def complete(self, request: ModelRequest) -> ModelReply:
        return ModelReply(message=Message(role="assistant", content="ok"),
                          usage=Usage(input=900, output=5, cache_read=100, cache_write=700),
                          finish_reason="stop", model=self.model)


async def reports_cache_writes(ctx, input):
    reply = await ctx.llm(ModelRequest(model=ctx.model_name, messages=(Message(role="user", content="hi"),)))
    await ctx.tokens(input=10, cache_write=4)
    return reply.usage.cache_write


async def test_cache_writes_are_recorded_and_replayed(store, db_path) -> None:
    handlers = RunHandlerRegistry({"cache": reports_cache_writes})
    async with RunManager.open(store, handlers=handlers, providers=lambda spec: Caching()) as runs:
        outcome = await runs.run("cache", None, model="stub:caching")
    assert outcome.status == "completed" and outcome.result == 700
    events = [r.event for r in await store.read_stream(run_stream(outcome.run_id))]
    (turn,) = [e for e in events if isinstance(e, RunLlmTurn)]
    (added,) = [e for e in events if isinstance(e, RunTokensAdded)]
    assert (turn.cache_write, turn.usage.cache_read, added.cache_write) == (700, 100, 4)

    with DatabaseRuns(db_path) as source:
        report = await replay(source, outcome.run_id, registry=None, handlers=handlers)
    assert report.tree_exact  # the handler was served 700 again, as its recorded result says
