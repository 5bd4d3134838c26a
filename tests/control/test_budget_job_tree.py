"""A `job:ID` budget covers the job's tree: the runs of its child jobs, at any
depth (the ledger's parent_id chain), pay into it, and are refused at its cap."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.worker import WorkerConfig
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.control.budget_book import BudgetBook
from gormes.control.budgets import applicable, job_ancestors
from gormes.events.budgets import BudgetExhausted, BudgetSettled, budget_stream
from gormes.events.runs import RunLlmFailed, RunStarted, run_stream
from gormes.tools.builtin import default_registry

TESTS = Path(__file__).resolve().parents[1]
for folder in ("actors/runs", ""):
    if str(TESTS / folder) not in sys.path:
        sys.path.insert(0, str(TESTS / folder))

from agent_worker import work_until_ended  # noqa: E402
from run_fixtures import script, workspace  # noqa: E402, F401 (fixtures)

from pg_helpers import backend_store  # noqa: E402

USED = {"input": 20, "output": 10}
HELD = "held"  # a queue no worker here takes: the tree's upper jobs wait in it


async def events_of(store, stream: str) -> list:
    return [r.event for r in await store.read_stream(stream)]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_the_ancestors_are_the_ledgers_parent_chain_and_each_existing_job_budget_applies(
    backend, db_path,
) -> None:
    async with backend_store(backend, db_path) as store:
        await _ancestors_and_budgets(store)


async def _ancestors_and_budgets(store) -> None:
    queue = await JobQueue.open(store)
    top = await queue.submit("noop", None, {"queue": HELD})
    middle = await queue.submit("noop", None, {"queue": HELD, "parent_id": top.id})
    leaf = await queue.submit("noop", None, {"queue": HELD, "parent_id": middle.id})
    other = await queue.submit("noop", None, {"queue": HELD})
    assert await store.read_sql(lambda conn: job_ancestors(conn, leaf.id)) == [middle.id, top.id]
    assert await store.read_sql(lambda conn: job_ancestors(conn, top.id)) == []
    book = BudgetBook(store)
    await book.set(f"job:{top.id}", tokens=1000)
    await book.set(f"job:{leaf.id}", tokens=1000)
    await book.set(f"job:{other.id}", tokens=1000)
    # nearest first; a job of the tree without a budget adds none; another tree's budget never applies
    assert await applicable(store, None, job_id=leaf.id, scope=None) == (f"job:{leaf.id}", f"job:{top.id}")
    assert await applicable(store, None, job_id=middle.id, scope=None) == (f"job:{top.id}",)
    assert await applicable(store, None, job_id=other.id, scope=None) == (f"job:{other.id}",)
    # a caller that knows its job is a tree's top (the worker: a claimed job's parent_id)
    # spares the ancestors; the budgets' streams are looked up in one query
    await book.set("scope:chat:x", tokens=1000)
    assert await applicable(store, None, job_id=other.id, scope="chat:x", job_has_parent=False) == (
        f"job:{other.id}", "scope:chat:x")
    assert await applicable(store, None, job_id=top.id, scope="chat:none", job_has_parent=False) == (
        f"job:{top.id}",)


async def test_a_grandchild_agent_jobs_turns_are_refused_at_its_grandparents_cap(
    store, db_path, script, workspace, monkeypatch,
) -> None:
    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    model = script({"replies": [
        {"tool_calls": [{"name": "fs.read", "arguments": {"path": "README.md"}}], "usage": USED},
        {"text": "all done", "usage": USED},
    ]})
    queue = await JobQueue.open(store)
    top = await queue.submit("noop", None, {"queue": HELD})
    middle = await queue.submit("noop", None, {"queue": HELD, "parent_id": top.id})
    child = await queue.submit("agent", {"prompt": "work", "model": model},
                               {"parent_id": middle.id, "max_attempts": 1})
    # each turn reserves 50 output tokens and about 1 for its prompt, and settles to 30:
    # the first fits 80, the second (30 spent + 51) does not
    tree = f"job:{top.id}"
    await BudgetBook(store).set(tree, tokens=80, output_estimate=50, bytes_per_token=1000)

    finished = await work_until_ended(queue, child.id, WorkerConfig(concurrency=1, queues=("default",)),
                                      store=store, log=lambda _: None)
    assert finished.status == "dead"
    assert "BudgetExceeded" in finished.error or f"budget {tree}" in finished.error, finished.error
    runs = [r.event.run_id for r in await store.read_all(types=["run.started"])]
    assert len(runs) == 1
    events = await events_of(store, run_stream(runs[0]))
    started = events[0]
    assert isinstance(started, RunStarted) and started.job_id == child.id and started.budgets == (tree,)
    [failed] = [e for e in events if isinstance(e, RunLlmFailed)]
    assert failed.error_type == "BudgetExceeded" and failed.error.startswith(f"budget {tree}: ")

    budget = await events_of(store, budget_stream(tree))
    assert [e.run_id for e in budget if isinstance(e, BudgetExhausted)] == [runs[0]]
    assert sum(isinstance(e, BudgetSettled) for e in budget) == 1
    view = await BudgetBook(store).get(tree)
    assert (view.spent_tokens, view.turns, view.refused, view.held_tokens) == (30, 1, 1, 0)
    assert view.spent_tokens <= view.tokens_cap

    with DatabaseRuns(db_path) as source:
        report = await replay(source, runs[0], registry=default_registry())
    assert report.first_divergence is None and report.tree_exact
