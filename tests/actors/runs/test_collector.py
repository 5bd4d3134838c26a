"""gormes/actors/runs/collector.py: the collector's youngest generation follows the runs in flight."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import trio

from gormes.actors.runs import collector
from gormes.actors.runs.context import RunContext, RunHandlerRegistry
from gormes.actors.runs.manager import RunManager
from gormes.errors import ConcurrencyError
from gormes.events.sqlite import SQLiteEventStore


@pytest.fixture(autouse=True)
def thresholds() -> Iterator[None]:
    before, enabled = gc.get_threshold(), gc.isenabled()
    assert collector.in_flight() == 0
    gc.set_threshold(700, 10, 10)
    gc.enable()
    yield
    gc.set_threshold(*before)
    if not enabled:
        gc.disable()


def test_wanted_keeps_a_window_of_allocations_per_run() -> None:
    assert collector.wanted((700, 10, 10), 1) == (700, 10, 10)
    assert collector.wanted((700, 10, 10), 16384) == (collector.WINDOW_PER_RUN * 16384, 10, 10)
    assert collector.wanted((50_000, 10, 10), 256) == (50_000, 10, 10)  # the worker's own, wider already
    assert collector.wanted((50_000, 5, 20), 16384) == (collector.WINDOW_PER_RUN * 16384, 5, 20)
    assert collector.wanted((0, 10, 10), 16384) == (0, 10, 10)  # collection by threshold is off


def test_widened_while_runs_are_in_flight_and_restored_as_they_end() -> None:
    for _ in range(1000):
        collector.run_started()
    assert collector.in_flight() == 1000
    assert gc.get_threshold() == collector.wanted((700, 10, 10), 1024)
    for _ in range(1000):
        collector.run_ended()
    assert gc.get_threshold() == (700, 10, 10)


def test_narrowed_while_runs_remain_past_what_the_young_generation_holds() -> None:
    """Runs ending while others run: the young generation may hold more than the
    narrower threshold, and a collection then would walk every run left."""
    for _ in range(1000):
        collector.run_started()
    try:
        widened = gc.get_threshold()[0]
        young = [[] for _ in range(60_000)]  # tracked, alive: in the young generation's count
        assert gc.get_count()[0] > collector.wanted((700, 10, 10), 512)[0]
        for _ in range(600):
            collector.run_ended()  # 400 left: 512's threshold, unless the young count is past it
        assert collector.wanted((700, 10, 10), 512)[0] < gc.get_threshold()[0] <= widened
        del young
    finally:
        while collector.in_flight():
            collector.run_ended()
    assert gc.get_threshold() == (700, 10, 10)  # none left: back at once


def test_thresholds_set_meanwhile_become_the_base() -> None:
    for _ in range(600):
        collector.run_started()
    gc.set_threshold(10_000, 5, 10)
    for _ in range(600):
        collector.run_started()  # past 1024: looked at again
    assert gc.get_threshold() == collector.wanted((10_000, 5, 10), 2048)
    for _ in range(1200):
        collector.run_ended()
    assert gc.get_threshold() == (10_000, 5, 10)


def test_nothing_changes_with_the_collector_disabled() -> None:
    gc.disable()
    for _ in range(1000):
        collector.run_started()
    assert gc.get_threshold() == (700, 10, 10)
    for _ in range(1000):
        collector.run_ended()
    assert gc.get_threshold() == (700, 10, 10)


async def test_a_run_manager_s_runs_in_flight_widen_it(tmp_path) -> None:
    handlers = RunHandlerRegistry()
    release = trio.Event()

    async def wait(ctx: RunContext, input: object) -> int:
        await release.wait()
        return 1

    handlers.register("wait", wait)
    async with SQLiteEventStore.open(tmp_path / "runs.db") as store:
        async with RunManager.open(store, handlers=handlers) as runs:
            handles = [await runs.start("wait") for _ in range(600)]
            assert collector.in_flight() == 600
            assert gc.get_threshold() == collector.wanted((700, 10, 10), 1024) != (700, 10, 10)
            release.set()
            assert {(await h.outcome()).status for h in handles} == {"completed"}
    assert collector.in_flight() == 0
    assert gc.get_threshold() == (700, 10, 10)


async def test_a_run_counts_from_its_start_not_from_its_first_step(tmp_path, monkeypatch) -> None:
    """Ten thousand runs started at once allocate their state and wait for their
    `run.started` together: they are counted while they wait, and a start that
    fails (its run id taken) counts nothing afterwards."""
    handlers = RunHandlerRegistry()

    async def quick(ctx: RunContext, input: object) -> int:
        return 1

    handlers.register("quick", quick)
    async with SQLiteEventStore.open(tmp_path / "runs.db") as store:
        appending, go_on = trio.Event(), trio.Event()
        append = store.append

        async def held_append(*args: object, **kwargs: object) -> object:
            appending.set()
            await go_on.wait()
            return await append(*args, **kwargs)  # type: ignore[arg-type]

        async with RunManager.open(store, handlers=handlers) as runs:
            monkeypatch.setattr(store, "append", held_append)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(runs.run, "quick", None)
                await appending.wait()
                assert collector.in_flight() == 1  # its run.started not yet written
                go_on.set()
            assert collector.in_flight() == 0
            monkeypatch.setattr(store, "append", append)

            first = await runs.start("quick", run_id="taken")
            assert (await first.outcome()).status == "completed"
            with pytest.raises(ConcurrencyError, match="run-taken"):
                await runs.start("quick", run_id="taken")
            assert collector.in_flight() == 0


async def test_a_run_counts_until_its_end_is_written(tmp_path, monkeypatch) -> None:
    """Ten thousand runs that end together wait for their end's commit together, their
    state alive: counted until it is written, not from the moment their handler returned."""
    handlers = RunHandlerRegistry()
    returned = trio.Event()

    async def quick(ctx: RunContext, input: object) -> int:
        returned.set()
        return 1

    handlers.register("quick", quick)
    async with SQLiteEventStore.open(tmp_path / "runs.db") as store:
        writing_end, go_on = trio.Event(), trio.Event()
        transact = store.transact

        async def held_transact(fn, *args: object, **kwargs: object) -> object:
            if returned.is_set():
                writing_end.set()
                await go_on.wait()
            return await transact(fn, *args, **kwargs)

        monkeypatch.setattr(store, "transact", held_transact)
        async with RunManager.open(store, handlers=handlers) as runs:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(runs.run, "quick", None)
                await writing_end.wait()
                counted = collector.in_flight()
                go_on.set()
            assert counted == 1  # while its run.completed was not yet written
            assert collector.in_flight() == 0
