"""Which earlier child a resumed run's live spawn takes over: the k-th spawn after
the cut matches the k-th earlier one (same handler, input, tools, model), finished
or not (whether it can be taken over is `fork.resumable_run`'s to say); after a
mismatch nothing is matched."""

from __future__ import annotations

from gormes.actors.runs.child_resumption import ChildResumption
from gormes.events.base import Recorded
from gormes.events.runs import RunChildFinished, RunChildSpawned, RunClockRead


def spawned(seq: int, child: str, prompt: str, tools: tuple[str, ...] | None = None) -> Recorded:
    event = RunChildSpawned(seq=seq, child_run_id=child, handler="agent", input={"prompt": prompt}, tools=tools)
    return Recorded(seq, "run-p", seq + 1, event.type, event, 0.0)


def finished(seq: int, child: str) -> Recorded:
    event = RunChildFinished(seq=seq, child_run_id=child, status="completed", result="ok")
    return Recorded(seq, "run-p", seq + 1, event.type, event, 0.0)


def clock(seq: int) -> Recorded:
    event = RunClockRead(seq=seq, value=1.0)
    return Recorded(seq, "run-p", seq + 1, event.type, event, 0.0)


OBSERVED = [clock(1), spawned(2, "c1", "a"), spawned(3, "c2", "b"), finished(4, "c2"), spawned(5, "c3", "c")]


def test_spawns_after_the_cut_match_in_order_finished_or_not() -> None:
    resumption = ChildResumption.after(OBSERVED, 1)  # cut before c1's spawn
    assert resumption.take("agent", {"prompt": "a"}, None, None) == "c1"
    assert resumption.take("agent", {"prompt": "b"}, None, None) == "c2"  # finished: replayed to its end
    assert resumption.take("agent", {"prompt": "c"}, None, None) == "c3"
    assert resumption.take("agent", {"prompt": "c"}, None, None) is None  # no earlier spawn left


def test_a_spawn_asking_for_something_else_ends_the_matching() -> None:
    resumption = ChildResumption.after(OBSERVED, 1)
    assert resumption.take("agent", {"prompt": "other"}, None, None) is None
    assert resumption.take("agent", {"prompt": "b"}, None, None) is None
    assert resumption.take("agent", {"prompt": "c"}, None, None) is None


def test_tools_model_and_key_order() -> None:
    observed = [spawned(1, "c1", "a", tools=("fs.read",))]
    assert ChildResumption.after(observed, 0).take("agent", {"prompt": "a"}, None, None) is None
    assert ChildResumption.after(observed, 0).take("agent", {"prompt": "a"}, ("fs.read",), "m") is None
    assert ChildResumption.after(observed, 0).take("agent", {"prompt": "a"}, ("fs.read",), None) == "c1"
    two = RunChildSpawned(seq=1, child_run_id="c9", handler="agent", input={"a": 1, "b": 2})
    resumption = ChildResumption.after([Recorded(1, "run-p", 2, two.type, two, 0.0)], 0)
    assert resumption.take("agent", {"b": 2, "a": 1}, None, None) == "c9"  # same JSON, other key order


async def test_a_completed_or_cancelled_child_can_be_taken_over_a_failed_one_cannot(store) -> None:
    """`resumable_run`: a completed child is replayed to its end (all its
    observations are the prefix); a failed one starts afresh (None)."""
    from gormes.actors.runs.continuation import resumable_run
    from gormes.actors.runs.context import RunHandlerRegistry, run_handler
    from gormes.actors.runs.manager import RunManager

    handlers = RunHandlerRegistry()

    @run_handler("steps", registry=handlers)
    async def steps(ctx, input):
        await ctx.now()
        await ctx.random()
        if input == "fail":
            raise RuntimeError("it failed")
        return "ok"

    async with RunManager.open(store, handlers=handlers) as runs:
        completed = await runs.run("steps", "complete")
        failed = await runs.run("steps", "fail")
        assert (completed.status, failed.status) == ("completed", "failed")
        taken = await resumable_run(runs, completed.run_id)
        assert taken is not None and len(taken.prefix) == 2
        assert taken.origin.run_id == completed.run_id
        assert taken.origin.position == taken.prefix[-1].position
        assert await resumable_run(runs, failed.run_id) is None
        assert await resumable_run(runs, "no-such-run") is None
