"""A model turn cut short after its request left is recorded and counted
(decision 0080): the API bills the reply it began, so the stream's reported usage
is the run's `run.llm_cut`, and the run's tokens, the runs projection, the costs
read, the metrics, `gormes runs show`, the trace and the job's tokens count it;
replay passes over it, and a resumed attempt makes the turn again without
counting it twice. Before, only a watched turn's budget heard it (0069's second
addendum) and nothing else did."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from gormes.actors.jobs.queue import JobQueue
from gormes.actors.runs.costs import turns
from gormes.actors.runs.context import RunHandlerRegistry
from gormes.actors.runs.continuation import fork_run
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs import replay_context
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.tools.builtin import default_registry as default_ops
from gormes.control.budget_book import BudgetBook
from gormes.events.budgets import BudgetReleased, BudgetSettled, budget_stream
from gormes.events.jobs import Tokens
from gormes.events.runs import RunLlmCut, RunLlmTurn, RunStarted, run_stream
from gormes.projections.runner import ProjectionRunner
from gormes.projections.runs import TABLE
from gormes.projections.runs import runs as runs_projection
from gormes.providers.anthropic import AnthropicProvider
from gormes.providers.base import Message, ModelRequest
from gormes.telemetry.metrics import LogMetrics
from gormes.telemetry.spans import run_spans

TESTS = Path(__file__).resolve().parents[1]
for folder in ("", "providers", "mcp", "acceptance"):
    if str(TESTS / folder) not in sys.path:
        sys.path.insert(0, str(TESTS / folder))

from agent_worker import agent_worker  # noqa: E402
from cli_helpers import run_gormes  # noqa: E402
from anthropic_server import MessagesServer, Reply, Stall, StallMidStream  # noqa: E402
from mcp_helpers import call_ok, gormes_mcp  # noqa: E402
from pg_helpers import backend_store  # noqa: E402

CLAUDE = "anthropic:claude-test"
# what message_start reports of Reply(input_tokens=40, cache_read=8): the input the API bills
REPORTED = Tokens(input=48, output=1, cache_read=8)


def anthropic_at(server: MessagesServer):
    return lambda spec: AnthropicProvider(spec.partition(":")[2], base_url=server.base_url, api_key="sk-ant-test",
                                          env={}, stream=True)


def cut_reply() -> StallMidStream:
    return StallMidStream(Reply("never", input_tokens=40, cache_read=8))


async def events_of(store, stream: str) -> list:
    return [r.event for r in await store.read_stream(stream)]


async def replays_exactly(db_path: Path, run_id: str, registry=None) -> bool:
    """`registry`: the operations a worker's runs are offered (None: a RunManager's
    without an executor)."""
    with DatabaseRuns(db_path) as source:
        report = await replay(source, run_id, registry=registry)
    return report.first_divergence is None and report.tree_exact


async def test_a_turn_cut_by_the_deadline_is_recorded_and_counted_everywhere_the_run_is(store, db_path):
    """No budget and no rate rule (the turn nobody watched, which counted nothing)."""
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(cut_reply(), Stall())
        async with RunManager.open(store, providers=anthropic_at(server)) as runs:
            outcome = await runs.run("agent", {"prompt": "go"}, model=CLAUDE, deadline_s=1.0)
            # cut before any event came: recorded with no usage, nothing counted
            quiet = await runs.run("agent", {"prompt": "go"}, model=CLAUDE, deadline_s=0.5)
    assert outcome.status == "failed" and "deadline" in outcome.error
    events = await events_of(store, run_stream(outcome.run_id))
    [cut] = [e for e in events if isinstance(e, RunLlmCut)]
    assert (cut.usage, cut.model, cut.at_seq) == (REPORTED, "claude-test", 2)  # after the inbox read
    assert cut.request_hash and cut.duration_ms > 0
    assert outcome.tokens == REPORTED and events[-1].tokens == REPORTED  # the run's end says so
    [unreported] = [e for e in await events_of(store, run_stream(quiet.run_id)) if isinstance(e, RunLlmCut)]
    assert unreported.usage is None and quiet.tokens == Tokens()
    assert await replays_exactly(db_path, quiet.run_id)
    # replay passes over it: the handler was interrupted right there
    assert await replays_exactly(db_path, outcome.run_id)
    # the runs projection
    await ProjectionRunner(store, runs_projection).catch_up()
    row = await store.read_with(lambda log: log.conn.execute(
        f"SELECT tokens_input, tokens_output, iterations FROM {TABLE} WHERE run_id = ?",
        (outcome.run_id,)).fetchone())
    assert tuple(row) == (48, 1, 0)
    # the metrics: its tokens, no turn
    await JobQueue.open(store)  # the ledger's tables, which a scrape reads too
    snapshot = await LogMetrics(store).snapshot()
    assert snapshot.by_model["claude-test"].tokens == Tokens(input=48, output=1, cache_read=8)
    assert snapshot.by_model["claude-test"].turns == 0
    # the trace: an error span with its usage
    records = await store.read_stream(run_stream(outcome.run_id))
    [span] = [s for s in run_spans(records, trace="t" * 32, parent_span_id=None)
              if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert span.status == "error" and span.attributes["gen_ai.usage.input_tokens"] == 48
    # `gormes runs show`
    shown = run_gormes(db_path, "runs", "show", outcome.run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["own_tokens"]["input"] == 48 and view["tokens"]["output"] == 1
    [entry] = [e for e in view["timeline"] if e["type"] == "run.llm_cut"]
    assert (entry["at_seq"], entry["tokens"]["input"], entry["seq"]) == (2, 48, None)
    text = run_gormes(db_path, "runs", "show", outcome.run_id)
    assert text.returncode == 0, text.stderr
    assert "cut short while it streamed (billed: in 48 out 1)" in text.stdout
    # the forensic reads, as processes: replay from the database, and from an export
    replayed = run_gormes(db_path, "replay", outcome.run_id, "--json")
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["exact"] is True
    exported = db_path.parent / "cut.jsonl"
    done = run_gormes(db_path, "export", outcome.run_id, "--out", str(exported))
    assert done.returncode == 0, done.stderr
    assert '"run.llm_cut"' in exported.read_text()
    from_file = run_gormes(db_path.parent / "none.db", "replay", "--file", str(exported), "--json")
    assert from_file.returncode == 0, from_file.stderr
    assert json.loads(from_file.stdout)["exact"] is True
    # the doctor: the only model tokens of the week were cut
    checked = run_gormes(db_path, "doctor", "--json")
    [verdict] = [c for c in json.loads(checked.stdout)["checks"] if c["name"] == "runs.cut_turns"]
    assert verdict["status"] == "warn" and verdict["message"].startswith(
        "2 model turn(s) cut short before their replies were read in the last 7 days, 49 tokens billed")


async def test_a_budgeted_turn_cut_short_is_recorded_as_its_budget_is_settled(store, db_path):
    book = BudgetBook(store)
    await book.set("b", tokens=1_000_000, output_estimate=100)
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(cut_reply())
        async with RunManager.open(store, providers=anthropic_at(server)) as runs:
            outcome = await runs.run("agent", {"prompt": "go"}, model=CLAUDE, budget="b", deadline_s=1.0)
    [cut] = [e for e in await events_of(store, run_stream(outcome.run_id)) if isinstance(e, RunLlmCut)]
    view = await book.get("b")
    assert (view.spent.input, view.spent.output, view.spent.cache_read) == (cut.usage.input, cut.usage.output, 8)
    ends = [e for e in await events_of(store, budget_stream("b")) if isinstance(e, (BudgetSettled, BudgetReleased))]
    assert [type(e) for e in ends] == [BudgetSettled] and outcome.tokens == cut.usage == REPORTED
    assert await replays_exactly(db_path, outcome.run_id)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_the_costs_read_counts_a_cut_turn(backend, db_path):
    async with backend_store(backend, db_path) as store:
        with MessagesServer(require_key="sk-ant-test") as server:
            server.queue(cut_reply())
            async with RunManager.open(store, providers=anthropic_at(server)) as runs:
                outcome = await runs.run("agent", {"prompt": "go"}, model=CLAUDE, deadline_s=1.0)
        found = await store.read_sql(lambda conn: turns(conn, [outcome.run_id]))
    assert [(t.run_id, t.seq, t.model, t.tokens) for t in found] == [(outcome.run_id, 2, "claude-test", REPORTED)]


async def _until(predicate, timeout: float = 30.0) -> None:
    with trio.fail_after(timeout):  # only a guard against a hang
        while not await predicate():
            await trio.sleep(0.02)


async def test_a_paused_job_counts_the_turn_it_cut_and_its_resumed_attempt_counts_it_once(
        store, db_path, monkeypatch):
    """The job is paused while its run's reply streams: the attempt's run records the
    cut and the job is given it; resumed, the next attempt makes the turn again
    (the cut is not copied) and the job's tokens are the two turns', once each."""
    queue = await JobQueue.open(store)
    with MessagesServer(require_key="sk-ant-test") as server:
        monkeypatch.setenv("GORMES_ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("GORMES_ANTHROPIC_API_KEY", "sk-ant-test")
        server.queue(cut_reply(), Reply("Done.", input_tokens=40, output_tokens=3))
        job = await queue.submit("agent", {"prompt": "work", "model": CLAUDE})
        worker = agent_worker(queue, log=lambda _: None)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)

            async def streaming() -> bool:
                return len(server.requests) == 1
            await _until(streaming)
            await trio.sleep(1.0)  # message_start and ping are sent with the headers
            await queue.pause(job.id)

            async def attempt_ended() -> bool:  # its run ended as cancelled, its lease released
                return any(r.type == "run.cancelled" for r in await store.read_all())
            await _until(attempt_ended)
            await queue.resume(job.id)

            async def ended() -> bool:
                return (await queue.get(job.id)).status in ("completed", "failed", "dead")
            await _until(ended)
            worker.stop()
    done = await queue.get(job.id)
    assert done.status == "completed", done.error
    runs = [r.event for r in await store.read_all() if isinstance(r.event, RunStarted)]
    first, second = runs
    [cut] = [e for e in await events_of(store, run_stream(first.run_id)) if isinstance(e, RunLlmCut)]
    assert cut.usage == REPORTED
    assert second.resumed_from is not None and second.resumed_from.run_id == first.run_id
    resumed = await events_of(store, run_stream(second.run_id))
    assert not [e for e in resumed if isinstance(e, RunLlmCut)]
    [turn] = [e for e in resumed if isinstance(e, RunLlmTurn)]
    assert done.tokens == REPORTED + turn.usage
    for run in (first, second):
        assert await replays_exactly(db_path, run.run_id, registry=default_ops())


async def test_a_gateways_run_cut_by_its_own_deadline_counts_in_its_jobs_tokens(store, db_path, monkeypatch):
    """`run.submit` through `gormes mcp` (a process, driven by the mcp SDK client) with
    `deadline_s`: the caller that cut its runs short spent past every count. The
    job's tokens and the run's count the cut turn."""
    queue = await JobQueue.open(store)
    with MessagesServer(require_key="sk-ant-test") as server:
        monkeypatch.setenv("GORMES_ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("GORMES_ANTHROPIC_API_KEY", "sk-ant-test")
        for _ in range(5):  # however many attempts the job makes
            server.queue(cut_reply())
        worker = agent_worker(queue, log=lambda _: None)
        async with gormes_mcp(db_path, env={"GORMES_GATEWAY_MODELS": CLAUDE}) as client:
            job = await call_ok(client, "run__submit", prompt="go", model=CLAUDE, deadline_s=1)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)

                async def ended() -> bool:
                    return (await queue.get(job["id"])).status in ("completed", "failed", "dead")
                await _until(ended, timeout=120)
                worker.stop()
            done = await call_ok(client, "job__get", id=job["id"])
    cuts = [r.event for r in await store.read_all() if isinstance(r.event, RunLlmCut)]
    assert cuts and all(c.usage == REPORTED for c in cuts)
    billed = sum((c.usage for c in cuts), Tokens())
    assert done["tokens"]["input"] == billed.input > 0
    assert (await queue.get(job["id"])).tokens == billed


# -- a turn the handler's own scope cut short, and the run went on -----------------------


def _request(ctx) -> ModelRequest:
    return ModelRequest(model=ctx.model_name, messages=(Message(role="user", content="go"),))


async def timeboxed(ctx, input):
    """Gives the model `box_s` for a first answer, then asks again without a bound."""
    with trio.move_on_after(input["box_s"]):
        await ctx.llm(_request(ctx))
    return (await ctx.llm(_request(ctx))).message.content


async def unboxed(ctx, input):
    """The same handler with its bound taken out: a changed handler."""
    await ctx.llm(_request(ctx))
    return (await ctx.llm(_request(ctx))).message.content


@pytest.mark.parametrize("first", ["streamed", "silent"])
async def test_a_turn_the_handlers_own_scope_cut_replays_exactly(store, db_path, first):
    """Live, the handler's scope cuts its first turn (after message_start, or before
    any event) and the run goes on. Replay waits at that turn until the handler's
    scope cuts it again, and serves the second (it served the second's reply to
    the first call, and then diverged: asked for more than was recorded)."""
    handlers = RunHandlerRegistry({"timeboxed": timeboxed})
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(cut_reply() if first == "streamed" else Stall(), Reply("Done.", input_tokens=40, output_tokens=3))
        async with RunManager.open(store, providers=anthropic_at(server), handlers=handlers) as runs:
            outcome = await runs.run("timeboxed", {"box_s": 0.5}, model=CLAUDE)
    assert outcome.status == "completed" and outcome.result == "Done.", outcome.error
    events = await events_of(store, run_stream(outcome.run_id))
    [cut] = [e for e in events if isinstance(e, RunLlmCut)]
    [turn] = [e for e in events if isinstance(e, RunLlmTurn)]
    assert cut.at_seq == turn.seq == 1
    assert cut.usage == (REPORTED if first == "streamed" else None)
    assert outcome.tokens == turn.usage + (cut.usage or Tokens())
    with DatabaseRuns(db_path) as source:
        report = await replay(source, outcome.run_id, registry=None, handlers=handlers)
    assert report.first_divergence is None and report.tree_exact and report.status == "completed"


async def test_a_handler_that_no_longer_cuts_the_turn_diverges_there(store, db_path, monkeypatch):
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(cut_reply(), Reply("Done.", input_tokens=40, output_tokens=3))
        handlers = RunHandlerRegistry({"timeboxed": timeboxed})
        async with RunManager.open(store, providers=anthropic_at(server), handlers=handlers) as runs:
            outcome = await runs.run("timeboxed", {"box_s": 0.3}, model=CLAUDE)
    [cut] = [r for r in await store.read_stream(run_stream(outcome.run_id)) if isinstance(r.event, RunLlmCut)]
    with DatabaseRuns(db_path) as source:
        report = await replay(source, outcome.run_id, registry=None,
                              handlers=RunHandlerRegistry({"timeboxed": unboxed}))
    divergence = report.first_divergence
    assert divergence is not None and divergence.position == cut.position
    assert divergence.recorded.endswith(f"(cut short after {cut.event.duration_ms} ms)")
    assert "not cut short by the handler within" in divergence.asked

    # a recording's time is its word: a forged one is waited at no longer than the cap
    await store.read_with(lambda log: log.conn.execute(
        "UPDATE events SET data = json_set(data, '$.duration_ms', 1000000000000) WHERE position = ?",
        (cut.position,)))
    monkeypatch.setattr(replay_context, "MAX_CUT_WAIT_S", 0.5)
    with DatabaseRuns(db_path) as source:
        report = await replay(source, outcome.run_id, registry=None,
                              handlers=RunHandlerRegistry({"timeboxed": unboxed}))
    assert report.first_divergence.recorded.endswith("(cut short after 1000000000000 ms)")
    assert "not cut short by the handler within 0.5 s" in report.first_divergence.asked


async def test_a_fork_of_such_a_run_waits_at_the_cut_as_replay_does(store, db_path):
    """Forked at its last observation, the run's prefix (the cut, then the second
    turn) is served whole: the fork ends with the recorded answer and asks the model
    nothing (it was served the second turn's reply at its first, time-boxed call,
    then went live for the second)."""
    handlers = RunHandlerRegistry({"timeboxed": timeboxed})
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(cut_reply(), Reply("Done.", input_tokens=40, output_tokens=3))
        async with RunManager.open(store, providers=anthropic_at(server), handlers=handlers) as runs:
            outcome = await runs.run("timeboxed", {"box_s": 0.3}, model=CLAUDE)
            [turn] = [r for r in await store.read_stream(run_stream(outcome.run_id))
                      if isinstance(r.event, RunLlmTurn)]
            asked = len(server.requests)
            forked = await fork_run(runs, outcome.run_id, turn.position)
            # with another model the requests differ: the prefix is served as recorded, the cut's wait too
            other = await fork_run(runs, outcome.run_id, turn.position, model="anthropic:claude-other")
            assert len(server.requests) == asked  # nothing live
    assert other.outcome.status == "completed" and other.outcome.result == "Done.", other.outcome.error
    assert forked.outcome.status == "completed" and forked.outcome.result == "Done.", forked.outcome.error
    assert forked.copied == 1
    copied = await events_of(store, run_stream(forked.run_id))
    assert not [e for e in copied if isinstance(e, RunLlmCut)]  # the source's, with its tokens


# -- a subagent's turn cut short by its parent's deadline ---------------------------------


async def test_a_subagents_turn_cut_by_its_parents_deadline_is_counted_in_the_tree(store, db_path, monkeypatch):
    """The parent asks for a subagent, whose first reply is still streaming when the
    parent's deadline ends the tree: the child records the cut on its own stream,
    its end says so, the tree's tokens (`runs show`) hold it once, the job's tokens
    (the parent is an agent job's run) hold it, and the tree replays exactly."""
    queue = await JobQueue.open(store)
    spawn = ("toolu_1", "agent__spawn", json.dumps({"prompt": "look it up"}))
    with MessagesServer(require_key="sk-ant-test") as server:
        monkeypatch.setenv("GORMES_ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("GORMES_ANTHROPIC_API_KEY", "sk-ant-test")
        server.queue(Reply("", tools=[spawn], input_tokens=30, output_tokens=5), cut_reply())
        job = await queue.submit("agent", {"prompt": "delegate", "model": CLAUDE, "deadline_s": 2.0},
                                 {"max_attempts": 1})
        worker = agent_worker(queue, log=lambda _: None)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)

            async def ended() -> bool:
                return (await queue.get(job.id)).status in ("completed", "failed", "dead")
            await _until(ended)
            worker.stop()
    done = await queue.get(job.id)
    assert done.status == "dead" and "deadline" in (done.error or ""), (done.status, done.error)
    records = await store.read_all()
    [parent, child] = [r.event for r in records if isinstance(r.event, RunStarted)]
    assert child.parent_run_id == parent.run_id
    [cut] = [e for e in await events_of(store, run_stream(child.run_id)) if isinstance(e, RunLlmCut)]
    assert cut.usage == REPORTED and cut.at_seq == 2
    [turn] = [e for e in await events_of(store, run_stream(parent.run_id)) if isinstance(e, RunLlmTurn)]
    child_end = (await events_of(store, run_stream(child.run_id)))[-1]
    assert child_end.tokens == REPORTED
    assert done.tokens == turn.usage + REPORTED  # the job was given both turns, each once
    shown = run_gormes(db_path, "runs", "show", parent.run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    tree = Tokens(**{k: v for k, v in view["tree_tokens"].items() if v is not None})
    assert tree == turn.usage + REPORTED
    assert await replays_exactly(db_path, parent.run_id, registry=default_ops())
