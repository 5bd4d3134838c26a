"""The built-in agent loop on the real scripted provider, real tools over a temp
workspace, and a real store: what it records and how it ends."""

from __future__ import annotations

import msgspec
from run_helpers import run_events, types_of

from gormes.actors.runs.manager import RunManager
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    OBSERVATION_TYPES,
    RunChildFinished,
    RunCompleted,
    RunFailed,
    RunLlmFailed,
    RunLlmTurn,
    RunStarted,
    RunToolCalled,
    tokens_of,
)


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def observations(events: list) -> list:
    return [e for e in events if isinstance(e, OBSERVATION_TYPES)]


async def test_an_agent_reads_real_files_and_answers(store, executor, script):
    model = script({"replies": [
        {"tool_calls": [call("fs.list", path="notes"), call("fs.read", path="README.md")]},
        {"text": "the readme says every step is an event"},
    ]})
    async with RunManager.open(store, executor=executor) as runs:
        outcome = await runs.run("agent", {"prompt": "what does the readme say?"}, model=model)

    assert outcome.status == "completed"
    assert outcome.result == "the readme says every step is an event"
    events = await run_events(store, outcome.run_id)
    assert isinstance(events[0], RunStarted) and events[0].handler == "agent"
    assert len(events[0].handler_version) == 64
    assert isinstance(events[-1], RunCompleted)
    seen = observations(events)
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    tools = [e for e in events if isinstance(e, RunToolCalled)]
    assert [(t.operation, t.outcome) for t in tools] == [("fs.list", "ok"), ("fs.read", "ok")]
    assert "every step is an event" in msgspec.json.encode(tools[1].result).decode()
    # the second model turn saw both tool results
    turns = [e for e in events if isinstance(e, RunLlmTurn)]
    assert [t.message_count for t in turns] == [1, 4]
    total = sum((tokens_of(e) for e in events), Tokens())
    assert events[-1].tokens == total == outcome.tokens and total.input > 0


async def test_subagents_two_levels_deep_roll_their_tokens_up(store, executor, script):
    model = script(
        {"match": "GRANDCHILD", "replies": [
            {"tool_calls": [call("fs.read", path="notes/a.txt")]}, {"text": "alpha"}]},
        {"match": "CHILD", "replies": [
            {"tool_calls": [call("agent.spawn", prompt="GRANDCHILD read notes/a.txt")]},
            {"text": "child heard alpha"}]},
        {"replies": [
            {"tool_calls": [call("agent.spawn", prompt="CHILD one"), call("agent.spawn", prompt="CHILD two")]},
            {"text": "both children answered"}]},
    )
    async with RunManager.open(store, executor=executor) as runs:
        outcome = await runs.run("agent", {"prompt": "fan out"}, model=model)

    assert outcome.status == "completed", outcome
    parent = await run_events(store, outcome.run_id)
    finished = [e for e in parent if isinstance(e, RunChildFinished)]
    assert [f.status for f in finished] == ["completed", "completed"]
    assert [f.result for f in finished] == ["child heard alpha"] * 2
    for child in finished:
        child_events = await run_events(store, child.child_run_id)
        started = child_events[0]
        assert started.depth == 1 and started.parent_run_id == outcome.run_id
        assert started.trust == "child-agent"
        grand = [e for e in child_events if isinstance(e, RunChildFinished)]
        assert len(grand) == 1
        grand_events = await run_events(store, grand[0].child_run_id)
        assert grand_events[0].depth == 2
        assert grand_events[-1].tokens == grand[0].tokens
        # a child's total is its own usage plus its child's
        own = sum((e.usage for e in child_events if isinstance(e, RunLlmTurn)), Tokens())
        assert child.tokens == own + grand[0].tokens
    own = sum((e.usage for e in parent if isinstance(e, RunLlmTurn)), Tokens())
    assert outcome.tokens == own + finished[0].tokens + finished[1].tokens
    # spawns were recorded in call order, before any child finished
    kinds = [e.type for e in observations(parent)]
    assert kinds.index("run.child_spawned") < kinds.index("run.child_finished")
    assert kinds.count("run.child_spawned") == 2


async def test_a_retryable_provider_error_is_recorded_then_retried(store, executor, script):
    model = script({"replies": [{"error": "overloaded", "retryable": True}, {"text": "fine now"}]})
    async with RunManager.open(store, executor=executor, llm_backoff_s=0.001) as runs:
        outcome = await runs.run("agent", {"prompt": "hi"}, model=model)
    assert outcome.status == "completed" and outcome.result == "fine now"
    events = await run_events(store, outcome.run_id)
    failed = [e for e in events if isinstance(e, RunLlmFailed)]
    turn = next(e for e in events if isinstance(e, RunLlmTurn))
    assert len(failed) == 1 and failed[0].retryable and "overloaded" in failed[0].error
    assert failed[0].request_hash == turn.request_hash and failed[0].seq + 1 == turn.seq


async def test_a_non_retryable_provider_error_fails_the_run(store, executor, script):
    model = script({"replies": [{"error": "bad request", "retryable": False}]})
    async with RunManager.open(store, executor=executor) as runs:
        outcome = await runs.run("agent", {"prompt": "hi"}, model=model)
    assert outcome.status == "failed" and "bad request" in outcome.error
    assert (await types_of(store, outcome.run_id))[-2:] == ["run.llm_failed", "run.failed"]


async def test_max_iterations_fails_the_run(store, executor, script):
    model = script({"replies": [{"tool_calls": [call("time.now")]}] * 3})
    async with RunManager.open(store, executor=executor) as runs:
        outcome = await runs.run("agent", {"prompt": "loop"}, model=model, max_iterations=2)
    assert outcome.status == "failed" and outcome.error == "max iterations reached"
    events = await run_events(store, outcome.run_id)
    assert sum(isinstance(e, RunLlmTurn) for e in events) == 2
    assert isinstance(events[-1], RunFailed)


async def test_a_subagent_never_makes_more_turns_than_its_parent_may(store, executor, script):
    """The model asks for a child with a billion iterations (an attacker's finding:
    a gateway's run capped at 2 turns fanned out into children that were not)."""
    model = script(
        {"match": "GREEDY", "replies": [{"tool_calls": [call("time.now")]}] * 6},
        {"match": "QUIET", "replies": [{"tool_calls": [call("time.now")]}] * 6},
        {"replies": [
            {"tool_calls": [call("agent.spawn", prompt="GREEDY", max_iterations=1_000_000_000),
                            call("agent.spawn", prompt="QUIET")]},
            {"text": "done"}]},
    )
    async with RunManager.open(store, executor=executor) as runs:
        outcome = await runs.run("agent", {"prompt": "fan out"}, model=model, max_iterations=2)

    assert outcome.status == "completed", outcome
    finished = [e for e in await run_events(store, outcome.run_id) if isinstance(e, RunChildFinished)]
    assert [f.status for f in finished] == ["failed", "failed"]
    for child in finished:
        events = await run_events(store, child.child_run_id)
        assert events[0].max_iterations == 2  # the parent's cap, recorded with the child
        assert sum(isinstance(e, RunLlmTurn) for e in events) == 2
        assert events[-1].error == "max iterations reached"


def test_the_iteration_limit_is_the_smaller_of_what_is_given():
    from gormes.actors.runs.agent import DEFAULT_MAX_ITERATIONS, iteration_limit

    assert iteration_limit(None, None) == DEFAULT_MAX_ITERATIONS
    assert iteration_limit(50, None) == 50
    assert iteration_limit(None, 3) == 3
    assert iteration_limit(50, 3) == iteration_limit(3, 50) == 3
