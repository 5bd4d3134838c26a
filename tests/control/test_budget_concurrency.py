"""The cap holds under concurrency: 50 subagents against one budget, on SQLite and
PostgreSQL, from one store and from two (as two processes or hosts would be).

Each subagent makes one model turn (a scripted model that takes a moment, so
that the turns overlap); the budget's cap lets only some of them through. The
total spent never passes the cap, and neither does spent plus held after any
event of the budget's stream; the turns refused are recorded on their runs as
`run.llm_failed` BudgetExceeded, before any request left.
"""

from __future__ import annotations

import json
from pathlib import Path

import trio
from pg_helpers import backend, reopen_store, store_on_both_backends  # noqa: F401 (fixtures)

from gormes.actors.runs.context import RunHandlerRegistry, run_handler
from gormes.actors.runs.manager import RunManager
from gormes.control.budget_book import BudgetBook
from gormes.control.budget_rules import BudgetState, evolve, live_holds, total
from gormes.events.budgets import BudgetExhausted, BudgetReserved, BudgetSettled, budget_stream
from gormes.events.runs import RunChildSpawned, RunLlmFailed, RunLlmTurn, RunStarted, run_stream
from gormes.providers.base import Message, ModelRequest

handlers = RunHandlerRegistry()
USED = {"input": 30, "output": 60}  # what each turn reports: 90 tokens
CAP = 2000


@run_handler("spender", registry=handlers)
async def spender(ctx, input):
    request = ModelRequest(model=ctx.model_name, messages=(Message(role="user", content=f"child {input['n']}"),),
                           max_tokens=100)
    reply = await ctx.llm(request)
    return reply.message.content


@run_handler("fan_out", registry=handlers)
async def fan_out(ctx, input):
    children = [await ctx.spawn("spender", {"n": input["first"] + n}) for n in range(input["count"])]
    return [(await child.result()).status for child in children]


def scripted(tmp_path: Path) -> str:
    path = tmp_path / "spend.json"
    path.write_text(json.dumps({"agents": [{"replies": [{"text": "spent", "usage": USED, "delay_ms": 30}]}]}))
    return f"scripted:{path}"


async def check_the_budget_stream(store, budget_id: str, cap: int) -> BudgetState:
    """Fold the stream event by event: spent plus held within the cap at every step."""
    state = BudgetState(budget_id=budget_id)
    for record in await store.read_stream(budget_stream(budget_id)):
        state = evolve(state, record.event)
        spent = sum(total(t) for t in state.spent.values())
        held = sum(total(h.tokens) for h in live_holds(state, 0).values())
        assert spent + held <= cap, f"at version {record.version}: {spent} spent + {held} held > {cap}"
    return state


async def child_runs(store, parent_id: str) -> list[list]:
    parent = [r.event for r in await store.read_stream(run_stream(parent_id))]
    ids = [e.child_run_id for e in parent if isinstance(e, RunChildSpawned)]
    return [[r.event for r in await store.read_stream(run_stream(i))] for i in ids]


def outcome_counts(children: list[list]) -> tuple[int, int, int]:
    turns = sum(1 for events in children if any(isinstance(e, RunLlmTurn) for e in events))
    refused = [e for events in children for e in events if isinstance(e, RunLlmFailed)]
    assert all(e.error_type == "BudgetExceeded" and not e.retryable for e in refused)
    assert all(e.error.startswith("budget shared: this turn's worst case") for e in refused)
    spent = sum(e.usage.input + e.usage.output for events in children for e in events if isinstance(e, RunLlmTurn))
    return turns, len(refused), spent


async def test_50_subagents_of_one_run_never_spend_past_the_cap(store, tmp_path) -> None:
    await BudgetBook(store).set("shared", tokens=CAP, cost=None)
    async with RunManager.open(store, handlers=handlers) as runs:
        outcome = await runs.run("fan_out", {"first": 0, "count": 50}, model=scripted(tmp_path), budget="shared")
    assert outcome.status == "completed"
    started = (await store.read_stream(run_stream(outcome.run_id)))[0].event
    assert isinstance(started, RunStarted) and started.budgets == ("shared",)

    children = await child_runs(store, outcome.run_id)
    assert len(children) == 50
    assert all(events[0].budgets == ("shared",) for events in children)  # no child escapes the budget
    turns, refused, spent = outcome_counts(children)
    assert turns + refused == 50 and refused > 0 and turns > 0
    assert spent == turns * 90 <= CAP

    state = await check_the_budget_stream(store, "shared", CAP)
    assert sum(total(t) for t in state.spent.values()) == spent
    assert state.holds == {} and state.turns == turns and state.refused == refused and state.overrun == 0
    view = await BudgetBook(store).get("shared")
    assert view.spent_tokens == spent and view.held_tokens == 0 and view.tokens_left == CAP - spent


async def test_50_subagents_from_two_stores_never_spend_past_the_cap(store, tmp_path) -> None:
    await BudgetBook(store).set("shared", tokens=CAP, cost=None)
    model = scripted(tmp_path)
    outcomes = {}
    async with reopen_store(store) as other:

        async def fan(name: str, on, first: int) -> None:
            async with RunManager.open(on, handlers=handlers) as runs:
                outcomes[name] = await runs.run("fan_out", {"first": first, "count": 25}, model=model,
                                                budget="shared")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fan, "one", store, 0)
            nursery.start_soon(fan, "two", other, 25)
    children = [*await child_runs(store, outcomes["one"].run_id), *await child_runs(store, outcomes["two"].run_id)]
    assert len(children) == 50
    turns, refused, spent = outcome_counts(children)
    assert turns + refused == 50 and refused > 0
    assert spent == turns * 90 <= CAP
    state = await check_the_budget_stream(store, "shared", CAP)
    assert sum(total(t) for t in state.spent.values()) == spent and state.holds == {}
    # every reservation and refusal is one event appended at the stream's next version
    records = await store.read_stream(budget_stream("shared"))
    assert [r.version for r in records] == list(range(1, len(records) + 1))
    kinds = [type(r.event) for r in records]
    assert kinds.count(BudgetReserved) == kinds.count(BudgetSettled) == turns
    assert kinds.count(BudgetExhausted) == refused
