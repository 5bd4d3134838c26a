"""A run tree's tokens add up whatever each run's end (decision 0035): `runs show`
gives `tree_tokens` and `tree_cost` over every run of the tree, a child that failed
and one its parent never awaited (cancelled with it) included, each counted once."""

from __future__ import annotations

import trio

from gormes.actors.runs.context import RunHandlerRegistry
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.timeline import NO_ENTRIES, TimelinePage, run_view
from gormes.providers.base import Message, ModelReply, ModelRequest, Usage
from gormes.providers.pricing import Price, PricingTable

TABLE = PricingTable({"stub": Price(input=1.0, output=2.0)}, "t-1")


class Stub:
    name = "stub:stub"
    model = "stub"

    async def complete(self, request: ModelRequest) -> ModelReply:
        return ModelReply(message=Message(role="assistant", content="ok"),
                          usage=Usage(input=100, output=10, cache_write=5, reasoning=3),
                          finish_reason="stop", model=self.model)


async def ask(ctx) -> None:
    await ctx.llm(ModelRequest(model=ctx.model_name, messages=(Message(role="user", content="hi"),)))


async def failing(ctx, input):
    await ask(ctx)
    raise RuntimeError("the child failed")


ASKED: list[trio.Event] = []


async def lingering(ctx, input):
    await ask(ctx)
    ASKED[0].set()
    await trio.sleep_forever()  # never awaited: cancelled when its parent ends


async def parent(ctx, input):
    await ask(ctx)
    failed = await ctx.spawn("failing", None)
    await failed.result()  # observed: its total is in the parent's recorded tokens
    await ctx.spawn("lingering", None)
    await ASKED[0].wait()  # it has spent its turn (its end is never awaited)
    return "done"


async def test_every_child_s_tokens_are_in_the_tree_whatever_its_end(store) -> None:
    ASKED[:] = [trio.Event()]
    handlers = RunHandlerRegistry({"parent": parent, "failing": failing, "lingering": lingering})
    async with RunManager.open(store, handlers=handlers, providers=lambda spec: Stub()) as runs:
        outcome = await runs.run("parent", None, model="stub:stub")
    assert outcome.status == "completed"
    view = await run_view(store, outcome.run_id, tree=True, table=TABLE)
    one = {"input": 100, "output": 10, "cache_read": 0, "cache_write": 5, "reasoning": 3}
    statuses = sorted(child["status"] for child in view["children"])
    assert statuses == ["cancelled", "failed"]
    lingering_view = next(c for c in view["children"] if c["status"] == "cancelled")
    assert lingering_view["own_tokens"] == one  # it spent its turn before it was cancelled
    assert view["own_tokens"] == one
    # recorded: its own and the child it awaited; the tree: all three runs, once each
    assert view["tokens"] == {k: 2 * v for k, v in one.items()}
    assert view["tree_tokens"] == {k: 3 * v for k, v in one.items()}
    assert view["tree_cost"] == 3 * (100 * 1.0 + 10 * 2.0) / 1e6
    assert view["pricing"] == "t-1"
    # the same totals without --tree (the children's ids, not their views)
    flat = await run_view(store, outcome.run_id, tree=False, table=TABLE)
    assert flat["tree_tokens"] == view["tree_tokens"] and flat["tree_cost"] == view["tree_cost"]
    assert sorted(flat["children"]) == sorted(c["run_id"] for c in view["children"])
    # A page (run.timeline) and no entries (run.get) fold the run from its status
    # events alone (decision 0088): the same view but for the timeline.
    whole = {k: v for k, v in flat.items() if k != "timeline"}
    for page in (NO_ENTRIES, TimelinePage(limit=2, max_bytes=1 << 20)):
        paged = await run_view(store, outcome.run_id, tree=False, table=TABLE, page=page)
        assert {k: v for k, v in paged.items() if k not in ("timeline", "next")} == whole
    first = await run_view(store, outcome.run_id, tree=False, table=TABLE, page=TimelinePage(limit=2, max_bytes=1 << 20))
    rest = await run_view(store, outcome.run_id, tree=False, table=TABLE,
                          page=TimelinePage(after=first["next"], limit=500, max_bytes=1 << 20))
    assert first["timeline"] + rest["timeline"] == flat["timeline"] and rest["next"] is None
