"""Runs cut off with a lost attempt get an end: `run.cancelled` on the run and on
its descendants left with no end; a run that has ended, or that is still being
written, is left as it is."""

from __future__ import annotations

from run_helpers import run_events

from gormes.actors.cut_off import cut_off_reason, end_cut_off_runs
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    RecordedReply,
    RunCancelled,
    RunChildSpawned,
    RunCompleted,
    RunLlmTurn,
    RunStarted,
    run_stream,
)


def started(run_id: str, parent: str | None = None) -> RunStarted:
    return RunStarted(run_id=run_id, handler="agent", handler_version="v", parent_run_id=parent,
                      depth=0 if parent is None else 1)


def turn(seq: int, tokens: int) -> RunLlmTurn:
    return RunLlmTurn(seq=seq, request_hash="h", model="m", message_count=1,
                      reply=RecordedReply(content="..."), usage=Tokens(input=tokens, output=1))


async def record(store, run_id: str, *events) -> None:
    await store.append(run_stream(run_id), list(events), expected_version=0)


async def test_a_cut_off_run_and_its_endless_descendants_are_ended_once(store) -> None:
    await record(store, "p", started("p"), turn(1, 10), RunChildSpawned(seq=2, child_run_id="c1", handler="agent"),
                 RunChildSpawned(seq=3, child_run_id="c2", handler="agent"))
    await record(store, "c1", started("c1", "p"), turn(1, 5), RunChildSpawned(seq=2, child_run_id="g", handler="agent"))
    await record(store, "c2", started("c2", "p"), RunCompleted(result="done"))
    await record(store, "g", started("g", "c1"))
    reason = cut_off_reason("J1")

    assert await end_cut_off_runs(store, "p", reason) == ["p", "c1", "g"]
    for run_id, tokens in (("p", Tokens(input=10, output=1)), ("c1", Tokens(input=5, output=1)), ("g", Tokens())):
        assert (await run_events(store, run_id))[-1] == RunCancelled(reason=reason, tokens=tokens)
    assert isinstance((await run_events(store, "c2"))[-1], RunCompleted)  # it had ended
    assert "job J1" in reason and "lost" in reason
    # a second call finds nothing left to end and writes nothing
    head = await store.head()
    assert await end_cut_off_runs(store, "p", reason) == []
    assert await store.head() == head
    assert await end_cut_off_runs(store, "no-such-run", reason) == []


async def test_a_run_still_being_written_is_left_alone(store) -> None:
    """Its worker was alive after all: it appended between our read and our append,
    so the end conflicts and nothing is recorded for it or its children."""
    await record(store, "p", started("p"), RunChildSpawned(seq=1, child_run_id="c", handler="agent"))
    await record(store, "c", started("c", "p"))

    class Racing:
        """The store, with the live run appending right after the first read."""

        def __init__(self) -> None:
            self.raced = False

        async def read_stream(self, stream: str):
            records = await store.read_stream(stream)
            if not self.raced:
                self.raced = True
                await store.append(stream, [turn(2, 3)], expected_version=records[-1].version)
            return records

        async def append(self, *args, **kwargs):
            return await store.append(*args, **kwargs)

    assert await end_cut_off_runs(Racing(), "p", cut_off_reason("J2")) == []
    assert isinstance((await run_events(store, "p"))[-1], RunLlmTurn)
    assert len(await run_events(store, "c")) == 1


async def test_a_frozen_run_that_wakes_after_being_cut_off_records_no_second_end(store) -> None:
    """Its worker was frozen, not dead: the next attempt recorded the run as cut off;
    when the run then ends by itself, the end already recorded stands alone."""
    import trio

    from gormes.actors.run_context import RunHandlerRegistry, run_handler
    from gormes.actors.runs import RunManager
    from gormes.events.runs import TERMINAL_TYPES

    handlers = RunHandlerRegistry()
    thawed = trio.Event()

    @run_handler("frozen", registry=handlers)
    async def frozen(ctx, input):
        await ctx.now()
        await thawed.wait()
        return "woke up"

    async with RunManager.open(store, handlers=handlers) as runs:
        handle = await runs.start("frozen", None)
        while len(await run_events(store, handle.run_id)) < 2:
            await trio.sleep(0.005)
        assert await end_cut_off_runs(store, handle.run_id, cut_off_reason("J3")) == [handle.run_id]
        thawed.set()
        await handle.outcome()
    ends = [e for e in await run_events(store, handle.run_id) if isinstance(e, TERMINAL_TYPES)]
    assert ends == [RunCancelled(reason=cut_off_reason("J3"), tokens=Tokens())]
