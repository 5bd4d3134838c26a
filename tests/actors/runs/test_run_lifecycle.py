"""Deadlines, cancellation, the depth cap and the plain context calls, with small
run handlers of the tests' own (in a registry of their own)."""

from __future__ import annotations

import pytest
import trio
from run_helpers import run_events, types_of, wait_until

from gormes.actors.runs.context import RunHandlerRegistry, SpawnRefused, run_handler
from gormes.actors.runs.manager import RunManager
from gormes.events.runs import RunCancelled, RunChildSpawned, RunFailed, RunStarted

handlers = RunHandlerRegistry()


def handler(name: str):
    return run_handler(name, registry=handlers)



@handler("sleeper")
async def sleeper(ctx, input):
    await ctx.log("going to sleep")
    await trio.sleep_forever()


@handler("parent_of_sleepers")
async def parent_of_sleepers(ctx, input):
    children = [await ctx.spawn("sleeper", {"n": n}) for n in range(2)]
    return [(await child.result()).status for child in children]


@handler("diver")
async def diver(ctx, input):
    if ctx.depth < input["to"]:
        child = await ctx.spawn("diver", input)
        outcome = await child.result()
        return outcome.result if outcome.status == "completed" else outcome.error
    return ctx.depth


@handler("observer")
async def observer(ctx, input):
    t = await ctx.now()
    r = await ctx.random()
    await ctx.progress({"step": 1})
    await ctx.tokens(input=10, output=2)
    await ctx.log("done", "warning")
    return {"t": t, "r": r, "input": ctx.input}


async def test_a_deadline_fails_the_run_and_cancels_its_children(store):
    async with RunManager.open(store, handlers=handlers) as runs:
        outcome = await runs.run("parent_of_sleepers", None, deadline_s=0.2)
    assert outcome.status == "failed" and outcome.error == "deadline exceeded"
    events = await run_events(store, outcome.run_id)
    assert isinstance(events[-1], RunFailed)
    for spawned in (e for e in events if isinstance(e, RunChildSpawned)):
        child = await run_events(store, spawned.child_run_id)
        assert isinstance(child[-1], RunCancelled)
        assert child[-1].reason == "parent run's deadline exceeded"


async def test_cancelling_a_parent_cancels_its_children(store):
    async with RunManager.open(store, handlers=handlers) as runs:
        handle = await runs.start("parent_of_sleepers")

        async def both_children_asleep() -> bool:
            return (await store.read_all(types=["run.logged"])).__len__() == 2

        await wait_until(both_children_asleep)
        handle.cancel("operator said stop")
        outcome = await handle.outcome()
    assert outcome.status == "cancelled" and outcome.error == "operator said stop"
    events = await run_events(store, outcome.run_id)
    assert isinstance(events[-1], RunCancelled) and events[-1].reason == "operator said stop"
    children = [e.child_run_id for e in events if isinstance(e, RunChildSpawned)]
    assert len(children) == 2
    for child_id in children:
        child = await run_events(store, child_id)
        assert child[-1].reason == "parent run cancelled: operator said stop"
        assert (await types_of(store, child_id)) == ["run.started", "run.logged", "run.cancelled"]


async def test_the_depth_cap_refuses_a_spawn_and_records_nothing(store):
    async with RunManager.open(store, handlers=handlers, max_depth=2) as runs:
        ok = await runs.run("diver", {"to": 2})
        too_deep = await runs.run("diver", {"to": 3})
    assert ok.status == "completed" and ok.result == 2
    assert too_deep.status == "completed" and "depth cap reached" in too_deep.result
    # the run at depth 2 refused: its stream has no child_spawned
    chain = [too_deep.run_id]
    for _ in range(2):
        spawned = [e for e in await run_events(store, chain[-1]) if isinstance(e, RunChildSpawned)]
        chain.append(spawned[0].child_run_id)
    last = await run_events(store, chain[-1])
    assert last[0].depth == 2 and not any(isinstance(e, RunChildSpawned) for e in last)


async def test_spawning_an_unknown_handler_is_refused(store):
    async with RunManager.open(store, handlers=handlers) as runs:
        ctx_seen = {}

        @handler("asks_for_nobody")
        async def asks(ctx, input):
            try:
                await ctx.spawn("nobody", None)
            except SpawnRefused as exc:
                ctx_seen["error"] = str(exc)
            return "ok"

        outcome = await runs.run("asks_for_nobody")
    assert outcome.status == "completed" and "nobody" in ctx_seen["error"]


async def test_every_context_call_is_recorded_in_order_before_it_returns(store):
    values = iter([0.25])
    async with RunManager.open(store, handlers=handlers, clock=lambda: 1234.5, random=lambda: next(values)) as runs:
        outcome = await runs.run("observer", {"x": 1})
    assert outcome.result == {"t": 1234.5, "r": 0.25, "input": {"x": 1}}
    events = await run_events(store, outcome.run_id)
    assert [e.type for e in events] == [
        "run.started", "run.clock_read", "run.random_drawn", "run.progress",
        "run.tokens_added", "run.logged", "run.completed",
    ]
    assert [e.seq for e in events[1:-1]] == [1, 2, 3, 4, 5]
    assert events[-1].tokens.input == 10 and events[-1].tokens.output == 2


async def test_an_unknown_handler_or_bad_model_records_nothing(store):
    from gormes.errors import UserError

    async with RunManager.open(store, handlers=handlers) as runs:
        with pytest.raises(UserError, match="no run handler named 'ghost'"):
            await runs.start("ghost")
        with pytest.raises(UserError):
            await runs.start("observer", model="scripted:/nonexistent/script.json")
        with pytest.raises(UserError, match="not JSON"):
            await runs.start("observer", {"bad": object()})
    assert await store.head() == 0


async def test_run_started_records_the_run_options(store):
    async with RunManager.open(store, handlers=handlers) as runs:
        outcome = await runs.run("observer", None, tools=["fs.read"], max_iterations=4, deadline_s=9.0)
    started = (await run_events(store, outcome.run_id))[0]
    assert isinstance(started, RunStarted)
    assert (started.tools, started.max_iterations, started.deadline_s, started.depth, started.trust) == (
        ("fs.read",), 4, 9.0, 0, "operator")


@handler("spawner")
async def spawner(ctx, input):
    made = []
    for n in range(input["n"]):
        await ctx.log(f"spawn {n}")  # an observation between two spawns: a place to fork at
        try:
            child = await ctx.spawn("leaf", {"n": n})
        except SpawnRefused as exc:
            made.append(str(exc))
            continue
        made.append((await child.result()).result)
    return made


@handler("leaf")
async def leaf(ctx, input):
    return input["n"]


async def log_position(store, run_id: str, message: str) -> int:
    (record,) = [r for r in await store.read_stream(f"run-{run_id}") if getattr(r.event, "message", None) == message]
    return record.position


async def test_the_spawn_cap_refuses_a_spawn_and_replays_exactly(store):
    from gormes.actors.runs.recorded import DatabaseRuns
    from gormes.actors.runs.replay import replay

    async with RunManager.open(store, handlers=handlers, max_children=2) as runs:
        outcome = await runs.run("spawner", {"n": 3})
    assert outcome.result[:2] == [0, 1]
    assert outcome.result[2] == f"spawn cap reached: run {outcome.run_id} has spawned 2 subagents, its cap (max_children 2)"
    events = await run_events(store, outcome.run_id)
    assert isinstance(events[0], RunStarted) and events[0].max_children == 2
    assert sum(isinstance(e, RunChildSpawned) for e in events) == 2
    for child_id in (e.child_run_id for e in events if isinstance(e, RunChildSpawned)):
        assert (await run_events(store, child_id))[0].max_children == 2  # the parent's cap
    with DatabaseRuns(store.path) as source:
        report = await replay(source, outcome.run_id, registry=None, handlers=handlers)
    assert report.exact, report


@pytest.mark.parametrize(("recorded_cap", "fork_at", "expected"), [
    (2, "spawn 1", [0, 1, "capped"]),  # the live part spawns one more, then reaches the cap
    (2, "spawn 2", [0, 1, "capped"]),  # the prefix's two spawns count in the live part
    (None, "spawn 2", [0, 1, "capped"]),  # a run recorded with no cap: its fork has the manager's
])
async def test_a_fork_counts_the_spawns_its_prefix_served(store, recorded_cap, fork_at, expected):
    from gormes.actors.runs.continuation import fork_run

    async with RunManager.open(store, handlers=handlers, max_children=recorded_cap) as runs:
        if recorded_cap is None:
            runs.max_children = None  # as a gormes from before the cap recorded its runs
        source = await runs.run("spawner", {"n": 3})
    async with RunManager.open(store, handlers=handlers, max_children=2) as runs:
        forked = await fork_run(runs, source.run_id, at=await log_position(store, source.run_id, fork_at))
    result = forked.outcome.result
    assert [r if isinstance(r, int) else "capped" for r in result] == expected, result
    assert "spawn cap reached" in result[2]
    denied = [r.event for r in await store.read_all(types=["audit.operation"])
              if r.event.operation == "agent.spawn" and r.event.outcome == "denied"
              and r.event.caller == f"run-{forked.run_id}"]
    assert len(denied) == 1  # the fork's own refusal, audited


@handler("spawns_at_once")
async def spawns_at_once(ctx, input):
    results: list = []

    async def one(n: int) -> None:
        try:
            child = await ctx.spawn("leaf", {"n": n})
        except SpawnRefused:
            results.append("refused")
            return
        results.append((await child.result()).result)

    async with trio.open_nursery() as nursery:
        for n in range(input["n"]):
            nursery.start_soon(one, n)
    return sorted(results, key=str)


async def test_spawns_made_at_once_by_several_tasks_keep_to_the_cap(store):
    async with RunManager.open(store, handlers=handlers, max_children=2) as runs:
        outcome = await runs.run("spawns_at_once", {"n": 6})
    assert outcome.status == "completed"
    assert outcome.result.count("refused") == 4
    events = await run_events(store, outcome.run_id)
    assert sum(isinstance(e, RunChildSpawned) for e in events) == 2
