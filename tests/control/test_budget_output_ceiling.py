"""A budgeted turn cannot use more output than its budgets held (decision 0065):
the provider is sent the smallest output they reserved as `max_tokens`, the turn
records it, replays exactly, and is no overrun; a run charged to no budget sends
its handler's request as it is."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from gormes.actors.runs.agent import SPAWN_TOOL
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.control.budget_book import BudgetBook, InvalidBudget
from gormes.events.runs import RunLlmFailed, RunLlmTurn, run_stream
from gormes.providers.base import Message, ModelReply, ModelRequest, Usage, request_hash
from gormes.tools.budgets import BudgetSetInput

ESTIMATE = 100  # the budget's --output-estimate: the ceiling of an agent turn (it sets no max_tokens)
LONG = "word " * 2000  # the model would write 2500 tokens (four characters a token)


def scripted(tmp_path: Path, *replies: dict) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"agents": [{"replies": list(replies)}]}))
    return f"scripted:{path}"


async def events_of(store, run_id: str) -> list:
    return [r.event for r in await store.read_stream(run_stream(run_id))]


async def replays_exactly(db_path: Path, run_id: str) -> bool:
    with DatabaseRuns(db_path) as source:
        report = await replay(source, run_id, registry=None)
    return report.first_divergence is None and report.tree_exact


async def test_a_budgeted_agent_turn_is_held_to_the_output_its_budget_reserved(store, db_path, tmp_path) -> None:
    book = BudgetBook(store)
    await book.set("b", tokens=1_000_000, output_estimate=ESTIMATE)
    async with RunManager.open(store) as runs:
        outcome = await runs.run("agent", {"prompt": "write"}, model=scripted(tmp_path, {"text": LONG}), budget="b")
    assert outcome.status == "completed", outcome.error
    assert outcome.result == LONG[:ESTIMATE * 4]  # cut where the model stopped, as an API stops it
    [turn] = [e for e in await events_of(store, outcome.run_id) if isinstance(e, RunLlmTurn)]
    assert turn.reply.finish_reason == "length" and turn.usage.output == ESTIMATE
    assert turn.sent_max_tokens == ESTIMATE
    # the handler's request is what is recorded and hashed: it set no max_tokens
    assert turn.request.max_tokens is None
    asked = ModelRequest(model="scripted", messages=(Message(role="user", content="write"),), tools=(SPAWN_TOOL,))
    assert turn.request_hash == request_hash(asked)
    view = await book.get("b")
    assert view.overrun_tokens == 0 and view.spent.output == ESTIMATE  # held to it: no overrun
    assert await replays_exactly(db_path, outcome.run_id)


async def test_with_several_budgets_the_smallest_output_held_is_the_ceiling(store, db_path, tmp_path) -> None:
    book = BudgetBook(store)
    await book.set("b", tokens=1_000_000, output_estimate=5 * ESTIMATE)
    await book.set("scope:team", tokens=1_000_000, output_estimate=ESTIMATE)
    async with RunManager.open(store) as runs:
        outcome = await runs.run("agent", {"prompt": "write"}, model=scripted(tmp_path, {"text": LONG}),
                                 budget="b", memory_scope="team")
    assert outcome.status == "completed", outcome.error
    [turn] = [e for e in await events_of(store, outcome.run_id) if isinstance(e, RunLlmTurn)]
    assert turn.sent_max_tokens == ESTIMATE and turn.usage.output == ESTIMATE
    assert (await book.get("b")).overrun_tokens == 0 and (await book.get("scope:team")).overrun_tokens == 0


async def test_a_tool_call_cut_off_by_the_ceiling_fails_the_turn_and_replays(store, db_path, tmp_path) -> None:
    await BudgetBook(store).set("b", tokens=1_000_000, output_estimate=ESTIMATE)
    call = {"name": "fs.write", "arguments": {"path": "out.txt", "content": LONG}}
    async with RunManager.open(store) as runs:
        outcome = await runs.run("agent", {"prompt": "write"}, model=scripted(tmp_path, {"tool_calls": [call]}),
                                 budget="b")
    assert outcome.status == "failed" and "are not JSON" in outcome.error
    [failed] = [e for e in await events_of(store, outcome.run_id) if isinstance(e, RunLlmFailed)]
    assert failed.error_type == "InvalidModelReply" and not failed.retryable
    assert failed.sent_max_tokens == ESTIMATE
    assert await replays_exactly(db_path, outcome.run_id)


class Verbose:
    """A provider that ignores max_tokens and writes 1000 tokens; keeps what it was sent."""

    name = model = "verbose"

    def __init__(self) -> None:
        self.sent: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.sent.append(request)
        return ModelReply(message=Message(role="assistant", content="done"), usage=Usage(input=10, output=1000),
                          finish_reason="stop", model=self.model)


async def test_a_provider_that_ignores_the_ceiling_is_still_counted_as_an_overrun(store, tmp_path) -> None:
    book = BudgetBook(store)
    await book.set("b", tokens=1_000_000, output_estimate=ESTIMATE)
    provider = Verbose()
    async with RunManager.open(store, providers=lambda spec: provider) as runs:
        outcome = await runs.run("agent", {"prompt": "write"}, model="verbose", budget="b")
    assert outcome.status == "completed", outcome.error
    assert [r.max_tokens for r in provider.sent] == [ESTIMATE]
    view = await book.get("b")
    # settled to what it used; what passed the whole hold (a prompt bound, and the ceiling) is the overrun
    assert view.spent.output == 1000 and 0 < view.overrun_tokens <= 1000 - ESTIMATE


async def test_an_unbudgeted_run_sends_the_handlers_request_as_it_is(store, tmp_path) -> None:
    provider = Verbose()
    async with RunManager.open(store, providers=lambda spec: provider) as runs:
        outcome = await runs.run("agent", {"prompt": "write"}, model="verbose")
    assert outcome.status == "completed", outcome.error
    [turn] = [e for e in await events_of(store, outcome.run_id) if isinstance(e, RunLlmTurn)]
    assert [r.max_tokens for r in provider.sent] == [None]
    assert request_hash(provider.sent[0]) == turn.request_hash and turn.sent_max_tokens is None


class CountedLimits:
    """Rate limits that keep the request each turn was counted for."""

    def __init__(self) -> None:
        self.counted: list[ModelRequest] = []

    def watches(self, provider_name: str, model: str) -> bool:
        return True

    @asynccontextmanager
    async def turn(self, provider_name: str, request: ModelRequest) -> AsyncIterator[Any]:
        self.counted.append(request)
        yield SimpleNamespace(used=lambda usage: None)


async def test_the_rate_limits_count_the_output_bound_the_provider_is_sent(store, tmp_path) -> None:
    await BudgetBook(store).set("b", tokens=1_000_000, output_estimate=ESTIMATE)
    limits, provider = CountedLimits(), Verbose()
    async with RunManager.open(store, providers=lambda spec: provider, provider_limits=limits) as runs:
        outcome = await runs.run("agent", {"prompt": "write"}, model="verbose", budget="b")
    assert outcome.status == "completed", outcome.error
    assert limits.counted == provider.sent and limits.counted[0].max_tokens == ESTIMATE


async def test_an_output_estimate_below_one_is_refused_it_is_the_most_a_turn_may_write(store) -> None:
    with pytest.raises(InvalidBudget, match="output estimate 0 is below 1"):
        await BudgetBook(store).set("b", tokens=1000, output_estimate=0)
    with pytest.raises((InvalidBudget, msgspec.ValidationError), match="output estimate 0 is below 1"):
        msgspec.convert({"id": "b", "output_estimate": 0}, BudgetSetInput)
    assert await BudgetBook(store).list() == []
