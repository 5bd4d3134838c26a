"""The cap on the runs of one tree (`max_tree_runs`, decision 0063): counted across
the tree's runs, its refusals recorded on the refusing run's stream and served by
replay, the count rebuilt from the log by a fork and a resumed run, and kept by
spawns made at once in several runs of the tree."""

from __future__ import annotations

import pytest
import trio
from pg_helpers import backend, backend_store  # noqa: F401 (fixture)
from run_helpers import run_events, wait_until

from gormes.actors.runs.context import RunHandlerRegistry, SpawnRefused, run_handler
from gormes.actors.runs.manager import RunManager
from gormes.events.runs import RunChildSpawned, RunSpawnRefused, RunStarted

handlers = RunHandlerRegistry()
hold: dict[str, int | None] = {"at": None}  # the resume test stops `pairs` there


def handler(name: str):
    return run_handler(name, registry=handlers)


@handler("leaf")
async def leaf(ctx, input):
    return input["n"]


@handler("pair")
async def pair(ctx, input):
    """Two runs of the tree: itself and one leaf."""
    try:
        child = await ctx.spawn("leaf", input)
    except SpawnRefused as exc:
        return str(exc)
    return (await child.result()).result


@handler("pairs")
async def pairs(ctx, input):
    made = []
    for n in range(input["n"]):
        await ctx.log(f"pair {n}")  # an observation between two spawns: a place to fork at
        while hold["at"] == n:
            await trio.sleep(0.01)
        try:
            child = await ctx.spawn("pair", {"n": n})
        except SpawnRefused as exc:
            made.append(str(exc))
            continue
        made.append((await child.result()).result)
    return made


@handler("wide")
async def wide(ctx, input):
    """`n` spawns, one after another, each child doing the same below it; the
    children run, and spawn, at once: their spawns interleave at each record."""
    children, refused = [], 0
    for n in range(input["n"]):
        try:
            children.append(await ctx.spawn(input["child"], {"n": input["n"], "child": "leaf", "i": n}))
        except SpawnRefused:
            refused += 1
    return {"refused": refused, "ended": [(await child.result()).status for child in children]}


def tree_full(result) -> bool:
    return isinstance(result, str) and result.startswith("tree cap reached")


async def tree_of(store, root: str) -> list[str]:
    """The root and every run the log says it spawned, down the tree."""
    found, frontier = [root], [root]
    while frontier:
        frontier = [e.child_run_id for run in frontier for e in await run_events(store, run)
                    if isinstance(e, RunChildSpawned)]
        found += frontier
    return found


async def test_the_tree_cap_counts_the_subagents_of_subagents_and_replays_exactly(store):
    from gormes.actors.runs.recorded import DatabaseRuns
    from gormes.actors.runs.replay import replay

    async with RunManager.open(store, handlers=handlers, max_tree_runs=6) as runs:
        outcome = await runs.run("pairs", {"n": 3})
    # root, pair 0 and its leaf, pair 1 and its leaf, pair 2: six; pair 2's leaf is refused
    assert outcome.result[:2] == [0, 1] and tree_full(outcome.result[2]), outcome.result
    assert f"the tree of run {outcome.run_id} holds 6 runs" in outcome.result[2]
    tree = await tree_of(store, outcome.run_id)
    assert len(tree) == 6
    for run in tree:
        started = (await run_events(store, run))[0]
        assert isinstance(started, RunStarted) and started.max_tree_runs == 6  # recorded, the tree's
    refusing = [e.child_run_id for e in await run_events(store, outcome.run_id) if isinstance(e, RunChildSpawned)][2]
    refused = [e for e in await run_events(store, refusing) if isinstance(e, RunSpawnRefused)]
    assert [(e.handler, e.input, e.reason) for e in refused] == [("leaf", {"n": 2}, outcome.result[2])]
    denied = [r.event for r in await store.read_all(types=["audit.operation"])
              if r.event.operation == "agent.spawn" and r.event.outcome == "denied"]
    assert [e.caller for e in denied] == [f"run-{refusing}"]
    assert "tree cap reached" in denied[0].error
    before = len(await store.read_all())
    with DatabaseRuns(store.path) as source:
        report = await replay(source, outcome.run_id, registry=None, handlers=handlers)
    assert report.tree_exact, report
    assert len(await store.read_all()) == before  # replay wrote nothing


async def test_spawns_made_at_once_in_several_runs_of_a_tree_keep_to_its_cap(store):
    from gormes.actors.runs.recorded import DatabaseRuns
    from gormes.actors.runs.replay import replay

    async with RunManager.open(store, handlers=handlers, max_tree_runs=10) as runs:
        outcome = await runs.run("wide", {"n": 4, "child": "wide"})  # 1 + 4 + 16 asked
    assert outcome.status == "completed"
    tree = await tree_of(store, outcome.run_id)
    assert len(tree) == 10
    # how many asked depends on timing: a child refused asks for no leaves
    refusals = [e for run in tree for e in await run_events(store, run) if isinstance(e, RunSpawnRefused)]
    assert refusals and all(e.reason.startswith("tree cap reached") for e in refusals)
    with DatabaseRuns(store.path) as source:
        report = await replay(source, outcome.run_id, registry=None, handlers=handlers)
    assert report.tree_exact, report


async def log_position(store, run_id: str, message: str) -> int:
    (record,) = [r for r in await store.read_stream(f"run-{run_id}") if getattr(r.event, "message", None) == message]
    return record.position


@pytest.mark.parametrize("fork_at", ["pair 1", "pair 2"])
async def test_a_fork_counts_the_runs_its_prefix_spawned_down_the_tree(store, fork_at):
    from gormes.actors.runs.continuation import fork_run

    async with RunManager.open(store, handlers=handlers, max_tree_runs=6) as runs:
        source = await runs.run("pairs", {"n": 3})
    async with RunManager.open(store, handlers=handlers) as runs:  # the recorded cap is the fork's
        forked = await fork_run(runs, source.run_id, at=await log_position(store, source.run_id, fork_at))
    assert forked.outcome.result[:2] == [0, 1] and tree_full(forked.outcome.result[2]), forked.outcome.result
    assert f"the tree of run {forked.run_id} holds 6 runs" in forked.outcome.result[2]
    assert (await run_events(store, forked.run_id))[0].max_tree_runs == 6


async def test_a_fork_serves_the_refusal_its_prefix_recorded_and_replays_exactly(store):
    from gormes.actors.runs.continuation import fork_run
    from gormes.actors.runs.recorded import DatabaseRuns
    from gormes.actors.runs.replay import replay

    async with RunManager.open(store, handlers=handlers, max_tree_runs=3) as runs:
        source = await runs.run("pairs", {"n": 3})  # root, pair 0, its leaf; pairs 1 and 2 refused
    assert source.result[0] == 0 and all(tree_full(r) for r in source.result[1:]), source.result
    async with RunManager.open(store, handlers=handlers) as runs:
        forked = await fork_run(runs, source.run_id, at=await log_position(store, source.run_id, "pair 2"))
    assert forked.outcome.result[1] == source.result[1]  # served from the prefix, as recorded
    assert f"the tree of run {forked.run_id} holds 3 runs" in forked.outcome.result[2]  # its own, live
    copied = [e for e in await run_events(store, forked.run_id) if isinstance(e, RunSpawnRefused)]
    assert len(copied) == 2
    with DatabaseRuns(store.path) as recorded:
        report = await replay(recorded, forked.run_id, registry=None, handlers=handlers)
    assert report.tree_exact, report


async def test_a_run_recorded_before_the_cap_replays_without_one_and_its_fork_gets_the_managers(store):
    from gormes.actors.runs.continuation import fork_run
    from gormes.actors.runs.recorded import DatabaseRuns
    from gormes.actors.runs.replay import replay

    async with RunManager.open(store, handlers=handlers) as runs:
        runs.max_tree_runs = None  # as a gormes from before the cap recorded its runs
        source = await runs.run("pairs", {"n": 3})
    assert source.result == [0, 1, 2]
    assert {(await run_events(store, r))[0].max_tree_runs for r in await tree_of(store, source.run_id)} == {None}
    with DatabaseRuns(store.path) as recorded:
        report = await replay(recorded, source.run_id, registry=None, handlers=handlers)
    assert report.tree_exact, report
    async with RunManager.open(store, handlers=handlers, max_tree_runs=4) as runs:
        forked = await fork_run(runs, source.run_id, at=await log_position(store, source.run_id, "pair 1"))
    # the prefix's pair 0 and its leaf, with the root: 3; pair 1 makes 4, its leaf is refused
    assert forked.outcome.result[0] == 0 and tree_full(forked.outcome.result[1]), forked.outcome.result
    assert (await run_events(store, forked.run_id))[0].max_tree_runs == 4


async def test_a_resumed_run_counts_the_runs_its_prefix_spawned(backend, db_path):  # noqa: F811
    from gormes.actors.runs.resume import resume_from_outside

    hold["at"] = 2
    try:
        async with backend_store(backend, db_path) as store:
            async with RunManager.open(store, handlers=handlers, max_tree_runs=6) as runs:
                handle = await runs.start("pairs", {"n": 3})

                async def held() -> bool:
                    return any(getattr(e, "message", None) == "pair 2" for e in await run_events(store, handle.run_id))

                await wait_until(held)
                handle.cancel("interrupted")
                assert (await handle.outcome()).status == "cancelled"
                assert len(await tree_of(store, handle.run_id)) == 5  # root, pairs 0 and 1 and their leaves
                hold["at"] = None
                resumed = await resume_from_outside(runs, handle.run_id)
        # the prefix's five runs counted: pair 2 makes six, its leaf is refused
        result = resumed.outcome.result
        assert result[:2] == [0, 1] and tree_full(result[2]), result
        assert f"the tree of run {resumed.run_id} holds 6 runs" in result[2]
    finally:
        hold["at"] = None
