"""What happens at a budget's cap: `stop` (recorded on the run, replayed exactly)
and `pause` (a run of no job waits where it is; an agent job is paused, then
`gormes budget raise` from the CLI lets it go on to completion); which budgets a
run is charged to."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from gormes.actors.runs.context import RunHandlerRegistry, run_handler
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.control.budget_book import BudgetBook
from gormes.control.budgets import BudgetExceeded, BudgetMeter, UnknownBudget
from gormes.events.budgets import BudgetExhausted, BudgetRaised, budget_stream
from gormes.events.runs import RunLlmFailed, RunLlmTurn, RunStarted, run_stream
from gormes.providers.base import Message, ModelRequest

TESTS = Path(__file__).resolve().parents[1]
for folder in ("actors/runs", "acceptance", ""):
    if str(TESTS / folder) not in sys.path:
        sys.path.insert(0, str(TESTS / folder))

from cli_helpers import assert_one_line_error, run_gormes  # noqa: E402
from run_fixtures import script, workspace  # noqa: E402, F401 (fixtures)
from run_helpers import wait_until  # noqa: E402

handlers = RunHandlerRegistry()
USED = {"input": 20, "output": 10}


def request(ctx, *messages: Message) -> ModelRequest:
    return ModelRequest(model=ctx.model_name, messages=messages, max_tokens=40)


@run_handler("two_turns", registry=handlers)
async def two_turns(ctx, input):
    one = Message(role="user", content="one")
    first = await ctx.llm(request(ctx, one))
    try:
        second = await ctx.llm(request(ctx, one, first.message, Message(role="user", content="two")))
    except BudgetExceeded as exc:  # what the live run was refused, replay raises again
        return {"first": first.message.content, "refused": type(exc).__name__, "why": str(exc)}
    return {"first": first.message.content, "second": second.message.content}


def scripted(tmp_path: Path, *replies: dict) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"agents": [{"replies": list(replies)}]}))
    return f"scripted:{path}"


def two_replies(tmp_path: Path) -> str:
    return scripted(tmp_path, {"text": "a", "usage": USED}, {"text": "b", "usage": USED})


async def events_of(store, stream: str) -> list:
    return [r.event for r in await store.read_stream(stream)]


async def test_stop_at_the_cap_is_recorded_on_the_run_and_replays_exactly(store, db_path, tmp_path) -> None:
    # the first turn's worst case is 199 tokens (its 159 bytes, 40 max_tokens) and it settles
    # to 30: it fits 220; the second's (30 spent + a longer request) does not
    await BudgetBook(store).set("b", tokens=220)
    async with RunManager.open(store, handlers=handlers) as runs:
        outcome = await runs.run("two_turns", None, model=two_replies(tmp_path), budget="b")
    assert outcome.status == "completed"
    assert outcome.result["first"] == "a" and outcome.result["refused"] == "BudgetExceeded"
    assert outcome.result["why"].startswith("budget b: this turn's worst case")
    events = await events_of(store, run_stream(outcome.run_id))
    failed = [e for e in events if isinstance(e, RunLlmFailed)]
    assert len(failed) == 1 and failed[0].error_type == "BudgetExceeded" and not failed[0].retryable
    assert failed[0].error == outcome.result["why"]
    assert sum(isinstance(e, RunLlmTurn) for e in events) == 1  # the refused request never left

    budget = await events_of(store, budget_stream("b"))
    exhausted = [e for e in budget if isinstance(e, BudgetExhausted)]
    assert len(exhausted) == 1 and exhausted[0].run_id == outcome.run_id and exhausted[0].policy == "stop"

    with DatabaseRuns(db_path) as source:
        report = await replay(source, outcome.run_id, registry=None, handlers=handlers)
    assert report.first_divergence is None and report.tree_exact and report.status == "completed"
    # replay served the refusal from the log: the budget was not asked again
    assert await events_of(store, budget_stream("b")) == budget


async def test_pause_without_a_job_waits_for_a_raise_then_goes_on(store, tmp_path) -> None:
    book = BudgetBook(store)
    await book.set("b", tokens=220, policy="pause")
    meter = BudgetMeter(store, poll_s=0.01)
    async with RunManager.open(store, handlers=handlers, budgets=meter) as runs:
        handle = await runs.start("two_turns", None, model=two_replies(tmp_path), budget="b")

        async def refused_once() -> bool:
            return any(isinstance(e, BudgetExhausted) for e in await events_of(store, budget_stream("b")))

        await wait_until(refused_once, timeout=10)
        assert not handle.run.done.is_set()  # waiting, not failed
        raised = await book.raise_("b", by=1000)
        assert raised.tokens_cap == 1220
        outcome = await handle.outcome()
    assert outcome.status == "completed" and outcome.result == {"first": "a", "second": "b"}
    events = await events_of(store, run_stream(outcome.run_id))
    assert not any(isinstance(e, RunLlmFailed) for e in events)  # the wait is no observation
    view = await book.get("b")
    assert view.spent_tokens == 60 and view.refused == 1 and view.held_tokens == 0


async def test_a_run_is_charged_to_its_scope_and_job_budgets_and_an_unknown_budget_is_refused(
    store, tmp_path,
) -> None:
    book = BudgetBook(store)
    await book.set("scope:team-a", tokens=10_000)
    await book.set("job:J1", cost=1.0)
    async with RunManager.open(store, handlers=handlers) as runs:
        outcome = await runs.run("two_turns", None, model=two_replies(tmp_path), memory_scope="team-a", job_id="J1")
        with pytest.raises(UnknownBudget, match="unknown budget 'nope'"):
            await runs.start("two_turns", None, model=two_replies(tmp_path), budget="nope")
        bare = await runs.run("two_turns", None, model=two_replies(tmp_path), memory_scope="team-b")
    started = (await events_of(store, run_stream(outcome.run_id)))[0]
    assert isinstance(started, RunStarted) and started.budgets == ("job:J1", "scope:team-a")
    assert (await book.get("scope:team-a")).spent_tokens == 60
    assert (await book.get("job:J1")).spent_tokens == 60
    assert (await events_of(store, run_stream(bare.run_id)))[0].budgets == ()
    assert [v.id for v in await book.list()] == ["job:J1", "scope:team-a"]


async def test_an_agent_job_paused_at_its_cap_goes_on_after_budget_raise_from_the_cli(
    store, db_path, script, workspace, monkeypatch,
) -> None:
    from agent_worker import agent_worker

    from gormes.actors.jobs.queue import JobQueue
    from gormes.actors.jobs.worker import WorkerConfig
    from gormes.tools.builtin import default_registry

    monkeypatch.setenv("GORMES_WORKSPACE", str(workspace))
    model = script({"replies": [
        {"tool_calls": [{"name": "fs.read", "arguments": {"path": "README.md"}}], "usage": USED},
        {"text": "all done", "usage": USED},
    ]})
    queue = await JobQueue.open(store)
    job = await queue.submit("agent", {"prompt": "work", "model": model})
    # each turn reserves 50 output tokens (no max_tokens) and a few for its prompt; settles to 30:
    # the first fits 80, the second (30 spent + 51 or more) does not
    await BudgetBook(store).set(f"job:{job.id}", tokens=80, policy="pause", output_estimate=50,
                                bytes_per_token=1000)

    async def status(*wanted: str) -> bool:
        found = await queue.get(job.id)
        return found is not None and found.status in wanted

    worker = agent_worker(queue, WorkerConfig(concurrency=1), store=store, log=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: status("paused"), timeout=20)
        budget = await events_of(store, budget_stream(f"job:{job.id}"))
        assert [e.job_paused for e in budget if isinstance(e, BudgetExhausted)] == [True]
        # parked (gormes/actors/jobs/parking.py): a raise of this budget is what resumes it
        from gormes.actors.jobs.parking import parked_on

        assert parked_on(await store.read_stream(f"job-{job.id}")) == f"budget-job:{job.id}"

        shown = await trio.to_thread.run_sync(lambda: run_gormes(db_path, "budget", "show", f"job:{job.id}", "--json"))
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["paused_jobs"] == [job.id]
        raised = await trio.to_thread.run_sync(lambda: run_gormes(db_path, "budget", "raise", f"job:{job.id}",
                                                                   "--by", "100"))
        assert raised.returncode == 0, raised.stderr
        assert f"budget job:{job.id}: policy pause" in raised.stdout

        await wait_until(lambda: status("completed", "failed", "dead"), timeout=20)
        worker.stop()
        await worker.wait_stopped()
    finished = await queue.get(job.id)
    assert finished.status == "completed", finished.error
    assert finished.result["result"] == "all done"

    budget = await events_of(store, budget_stream(f"job:{job.id}"))
    raises = [e for e in budget if isinstance(e, BudgetRaised)]
    assert len(raises) == 1 and raises[0].resumed_jobs == (job.id,) and raises[0].tokens == 180
    view = await BudgetBook(store).get(f"job:{job.id}")
    assert view.spent_tokens == 60 and view.turns == 2 and view.paused_jobs == []

    # the attempt paused at the cap and its continuation both replay exactly
    runs = [e.data["agent_run"] for e in (r.event.entry for r in await store.read_stream(f"job-{job.id}")
                                          if hasattr(r.event, "entry"))
            if isinstance(e.data, dict) and "agent_run" in e.data]
    assert len(runs) == 2
    with DatabaseRuns(db_path) as source:
        for run_id in runs:
            report = await replay(source, run_id, registry=default_registry())
            assert report.first_divergence is None and report.tree_exact
    first = await events_of(store, run_stream(runs[0]))
    assert first[-1].type == "run.cancelled" and first[-1].reason == "job paused"
    assert (await events_of(store, run_stream(runs[1])))[0].budgets == (f"job:{job.id}",)


def test_bad_input_is_one_line_and_changes_nothing(tmp_path) -> None:
    db = tmp_path / "g.db"
    assert run_gormes(db, "budget", "set", "b", "--tokens", "100").returncode == 0
    before = run_gormes(db, "budget", "show", "b", "--json")
    assert before.returncode == 0
    for args, says in (
        (("budget", "set", "b", "--tokens", "-5"), "negative"),
        (("budget", "set", "c", "--cost", "-0.5"), "negative"),
        (("budget", "raise", "b", "--by", "-1"), "negative"),
        (("budget", "raise", "b", "--to", "50"), "below the current cap of 100"),
        (("budget", "raise", "nope", "--by", "5"), "unknown budget 'nope'"),
        (("budget", "show", "nope"), "unknown budget 'nope'"),
        (("budget", "raise", "b"), "give one of --by and --to"),
        # a cap no run would ever pay into (a user audit's finding: both were taken)
        (("budget", "set", "trust:operator", "--tokens", "5"), "the operator's and the system's runs have no"),
        (("budget", "set", "trust:gatway", "--tokens", "5"), "only trust:gateway and trust:child-agent cap"),
        (("budget", "set", "job:NOSUCHJOB", "--tokens", "5"), "no job NOSUCHJOB"),
    ):
        result = run_gormes(db, *args)
        assert result.returncode == 2, (args, result)
        assert says in assert_one_line_error(result), args
    after = run_gormes(db, "budget", "show", "b", "--json")
    assert json.loads(after.stdout) == json.loads(before.stdout)
    listed = run_gormes(db, "budget", "list", "--json")
    assert [b["id"] for b in json.loads(listed.stdout)["budgets"]] == ["b"]


async def test_a_budget_on_a_trust_class_caps_every_gateway_whatever_its_name(store, tmp_path) -> None:
    """A gateway's scope is `chat:mcp-<the name it gives>`, so `scope:chat:mcp-alice`
    capped a client until it reconnected as `alice2`. `trust:gateway` caps every
    gateway's runs, and their subagents', together; an operator's runs pay nothing
    into it."""
    book = BudgetBook(store)
    await book.set("trust:gateway", tokens=420)  # a first turn holds 199 tokens, a second 362
    async with RunManager.open(store, handlers=handlers) as runs:
        first = await runs.run("two_turns", None, model=two_replies(tmp_path), trust="gateway",
                               memory_scope="chat:mcp-alice")
        renamed = await runs.run("two_turns", None, model=two_replies(tmp_path), trust="gateway",
                                 memory_scope="chat:mcp-alice2")
        operator = await runs.run("two_turns", None, model=two_replies(tmp_path))
    assert first.result == {"first": "a", "second": "b"}  # each turn used 30: 60 spent
    assert renamed.result["refused"] == "BudgetExceeded" and "trust:gateway" in renamed.result["why"]
    assert operator.result == {"first": "a", "second": "b"}
    for outcome, budgets in ((first, ("trust:gateway",)), (renamed, ("trust:gateway",)), (operator, ())):
        started = (await events_of(store, run_stream(outcome.run_id)))[0]
        assert isinstance(started, RunStarted) and started.budgets == budgets
    assert (await book.get("trust:gateway")).spent_tokens == 90


def test_a_jobs_budget_is_set_by_the_id_submit_printed(tmp_path) -> None:
    db = tmp_path / "g.db"
    job = run_gormes(db, "jobs", "submit", "echo")
    assert job.returncode == 0, job.stderr
    done = run_gormes(db, "budget", "set", f"job:{job.stdout.strip()}", "--tokens", "500", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["id"] == f"job:{job.stdout.strip()}"
