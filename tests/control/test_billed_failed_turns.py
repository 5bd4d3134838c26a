"""A failed model turn whose reply the API billed is counted (decision 0069): its
`run.llm_failed` records the usage, and the run's tokens and cost, its job's
tokens, its budgets (settled, not released), the runs projection, the metrics and
`gormes runs show` all count it, live and after replay. That holds for a failure
raised while a stream is read (its addendum), and for a run a gateway submits
through `gormes mcp`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.worker import WorkerConfig
from gormes.actors.runs.costs import turns
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.control.budget_book import BudgetBook
from gormes.events.budgets import BudgetReleased, BudgetSettled, budget_stream
from gormes.events.jobs import Tokens
from gormes.events.runs import RunLlmFailed, RunLlmTurn, run_stream
from gormes.projections.runner import ProjectionRunner
from gormes.projections.runs import TABLE
from gormes.projections.runs import runs as runs_projection
from gormes.providers.base import InvalidModelReply, Message, ModelReply, ModelRequest, Usage
from gormes.telemetry.metrics import LogMetrics

TESTS = Path(__file__).resolve().parents[1]
for folder in ("actors/runs", "", "mcp"):
    if str(TESTS / folder) not in sys.path:
        sys.path.insert(0, str(TESTS / folder))

from agent_worker import agent_worker, work_until_ended  # noqa: E402
from anthropic_server import ErrorMidStream, Garbled, MessagesServer, Reply, Stall, StallMidStream  # noqa: E402
from mcp_helpers import call_ok, gormes_mcp  # noqa: E402

from pg_helpers import backend_store  # noqa: E402
from gormes.providers.anthropic import AnthropicProvider  # noqa: E402

ESTIMATE = 100  # the budget's --output-estimate: the ceiling of an agent turn
CUT_OFF = {"tool_calls": [{"name": "fs.write", "arguments": {"path": "out.txt", "content": "word " * 2000}}]}


def scripted(tmp_path: Path, *replies: dict, name: str = "script") -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"agents": [{"replies": list(replies)}]}))
    return f"scripted:{path}"


async def events_of(store, stream: str) -> list:
    return [r.event for r in await store.read_stream(stream)]


async def replays_exactly(db_path: Path, run_id: str) -> bool:
    with DatabaseRuns(db_path) as source:
        report = await replay(source, run_id, registry=None)
    return report.first_divergence is None and report.tree_exact


def gormes(db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gormes", "--db", str(db), *args],
                          capture_output=True, text=True, timeout=120)


async def test_a_tool_call_cut_off_by_the_ceiling_is_counted_where_the_run_is_counted(store, db_path, tmp_path):
    book = BudgetBook(store)
    await book.set("b", tokens=1_000_000, output_estimate=ESTIMATE)
    async with RunManager.open(store) as runs:
        outcome = await runs.run("agent", {"prompt": "write"}, model=scripted(tmp_path, CUT_OFF), budget="b")
    assert outcome.status == "failed" and "are not JSON" in outcome.error
    [failed] = [e for e in await events_of(store, run_stream(outcome.run_id)) if isinstance(e, RunLlmFailed)]
    billed = failed.usage
    assert billed is not None and billed.output == ESTIMATE and billed.input > 0
    # the run's total
    assert outcome.tokens == billed
    # the budget settled to it: not released, as a failure with nothing billed is
    budget = await events_of(store, budget_stream("b"))
    assert [type(e) for e in budget if isinstance(e, (BudgetSettled, BudgetReleased))] == [BudgetSettled]
    view = await book.get("b")
    assert (view.spent.input, view.spent.output, view.held_tokens) == (billed.input, billed.output, 0)
    # the runs projection
    await ProjectionRunner(store, runs_projection).catch_up()
    row = await store.read_with(lambda log: log.conn.execute(
        f"SELECT tokens_input, tokens_output FROM {TABLE} WHERE run_id = ?", (outcome.run_id,)).fetchone())
    assert tuple(row) == (billed.input, billed.output)
    # the metrics: its tokens, but no turn
    await JobQueue.open(store)  # the ledger's tables, which a scrape reads too
    snapshot = await LogMetrics(store).snapshot()
    assert snapshot.by_model["scripted"].tokens.output == ESTIMATE
    assert snapshot.by_model["scripted"].turns == 0
    assert await replays_exactly(db_path, outcome.run_id)

    # `gormes runs show`: the run's tokens, and the failed turn's own
    shown = gormes(db_path, "runs", "show", outcome.run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    view_json = json.loads(shown.stdout)
    assert view_json["tokens"]["output"] == ESTIMATE and view_json["own_tokens"]["input"] == billed.input
    [entry] = [e for e in view_json["timeline"] if e["type"] == "run.llm_failed"]
    assert entry["tokens"]["output"] == ESTIMATE and entry["model"] == "scripted"
    text = gormes(db_path, "runs", "show", outcome.run_id)
    assert text.returncode == 0, text.stderr
    assert f"(billed: in {billed.input} out {ESTIMATE})" in text.stdout


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_the_costs_read_counts_a_billed_failure_and_not_one_with_nothing_billed(backend, db_path, tmp_path):
    failing = {"error": "the server is down", "retryable": False}
    async with backend_store(backend, db_path) as store:
        await BudgetBook(store).set("b", tokens=1_000_000, output_estimate=ESTIMATE)
        async with RunManager.open(store) as runs:
            cut = await runs.run("agent", {"prompt": "write"}, model=scripted(tmp_path, CUT_OFF), budget="b")
            down = await runs.run("agent", {"prompt": "write"}, model=scripted(tmp_path, failing, name="down"))
        found = await store.read_sql(lambda conn: turns(conn, [cut.run_id, down.run_id]))
    assert [(t.run_id, t.model, t.tokens.output) for t in found] == [(cut.run_id, "scripted", ESTIMATE)]
    assert found[0].tokens.input == cut.tokens.input > 0


class BrokenOnce:
    """A provider whose first reply breaks off after the API billed its prompt (a
    retryable `InvalidModelReply` with usage), and whose second is whole."""

    name = model = "flaky"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.calls += 1
        if self.calls == 1:
            raise InvalidModelReply("flaky: the stream ended before the reply finished", retryable=True,
                                    usage=Usage(input=300, output=7))
        return ModelReply(message=Message(role="assistant", content="done"), usage=Usage(input=300, output=2),
                          finish_reason="stop", model=self.model)


async def test_a_retried_turn_counts_both_attempts_and_replays_them(store, db_path):
    book = BudgetBook(store)
    await book.set("b", tokens=1_000_000, output_estimate=ESTIMATE)
    provider = BrokenOnce()
    async with RunManager.open(store, providers=lambda spec: provider, llm_backoff_s=0.0) as runs:
        outcome = await runs.run("agent", {"prompt": "go"}, model="flaky", budget="b")
    assert outcome.status == "completed", outcome.error
    events = await events_of(store, run_stream(outcome.run_id))
    [failed] = [e for e in events if isinstance(e, RunLlmFailed)]
    [turn] = [e for e in events if isinstance(e, RunLlmTurn)]
    assert failed.usage == Tokens(input=300, output=7) and failed.retryable
    assert outcome.tokens == Tokens(input=600, output=9)
    view = await book.get("b")
    assert (view.spent.input, view.spent.output, view.turns) == (600, 9, 2)
    # replay serves the failure, its usage with it, then the retry
    assert turn.request_hash == failed.request_hash
    assert await replays_exactly(db_path, outcome.run_id)


async def test_an_agent_jobs_tokens_count_the_billed_failure(store, tmp_path, monkeypatch):
    monkeypatch.setenv("GORMES_WORKSPACE", str(tmp_path))
    queue = await JobQueue.open(store)
    job = await queue.submit("agent", {"prompt": "write", "model": scripted(tmp_path, CUT_OFF)}, {"max_attempts": 1})
    await BudgetBook(store).set(f"job:{job.id}", tokens=1_000_000, output_estimate=ESTIMATE)
    finished = await work_until_ended(queue, job.id, WorkerConfig(concurrency=1), store=store, log=lambda _: None)
    assert finished.status == "dead" and "are not JSON" in finished.error
    [run_id] = [r.event.run_id for r in await store.read_all(types=["run.started"])]
    [failed] = [e for e in await events_of(store, run_stream(run_id)) if isinstance(e, RunLlmFailed)]
    assert failed.usage is not None and failed.usage.output == ESTIMATE
    assert finished.tokens == failed.usage


# -- a failure raised while the stream is read (decision 0069's addendum) -----------

CLAUDE = "anthropic:claude-test"


def anthropic_at(server: MessagesServer):
    return lambda spec: AnthropicProvider(spec.partition(":")[2], base_url=server.base_url, api_key="sk-ant-test",
                                          env={}, stream=True)


async def test_an_error_event_after_message_start_is_counted_and_the_retry_too(store, db_path):
    """Anthropic's `overloaded_error` mid-stream: message_start had reported the
    input, which the API bills; the turn is retried (the error is retryable)."""
    book = BudgetBook(store)
    await book.set("b", tokens=1_000_000, output_estimate=ESTIMATE)
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(ErrorMidStream(Reply("lost", input_tokens=40, cache_read=8)),
                     Reply("done", input_tokens=40, cache_read=8, output_tokens=3))
        async with RunManager.open(store, providers=anthropic_at(server), llm_backoff_s=0.0) as runs:
            outcome = await runs.run("agent", {"prompt": "go"}, model=CLAUDE, budget="b")
    assert outcome.status == "completed", outcome.error
    [failed] = [e for e in await events_of(store, run_stream(outcome.run_id)) if isinstance(e, RunLlmFailed)]
    assert "overloaded_error" in failed.error and failed.error_type == "ProviderError" and failed.retryable
    assert failed.usage == Tokens(input=48, output=1, cache_read=8)
    assert outcome.tokens == Tokens(input=96, output=4, cache_read=16)
    view = await book.get("b")
    assert (view.spent.input, view.spent.output, view.turns) == (96, 4, 2)
    assert await replays_exactly(db_path, outcome.run_id)


async def test_a_turn_cancelled_after_message_start_settles_its_budget_to_what_was_reported(store, db_path):
    """The run's deadline passes while the reply streams: message_start had reported
    the input, which the API bills. The budget settles to it (it released the hold,
    counting nothing: a caller that cut its runs short spent past every budget)."""
    book = BudgetBook(store)
    await book.set("b", tokens=1_000_000, output_estimate=ESTIMATE)
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(StallMidStream(Reply("never", input_tokens=40, cache_read=8)), Stall())
        async with RunManager.open(store, providers=anthropic_at(server)) as runs:
            cut = await runs.run("agent", {"prompt": "go"}, model=CLAUDE, budget="b", deadline_s=1.0)
            # cancelled before anything was reported: nothing to settle to
            quiet = await runs.run("agent", {"prompt": "go"}, model=CLAUDE, budget="b", deadline_s=0.5)
    assert (cut.status, quiet.status) == ("failed", "failed") and "deadline" in cut.error
    ends = [e for e in await events_of(store, budget_stream("b")) if isinstance(e, (BudgetSettled, BudgetReleased))]
    assert [type(e) for e in ends] == [BudgetSettled, BudgetReleased]
    view = await book.get("b")
    assert (view.spent.input, view.spent.output, view.spent.cache_read, view.turns) == (48, 1, 8, 1)
    assert view.held_tokens == 0
    assert await replays_exactly(db_path, cut.run_id)


async def test_a_malformed_event_after_message_start_is_counted(store, db_path):
    with MessagesServer(require_key="sk-ant-test") as server:
        server.queue(Garbled(Reply("lost", input_tokens=30, output_tokens=12), at=3))
        async with RunManager.open(store, providers=anthropic_at(server)) as runs:
            outcome = await runs.run("agent", {"prompt": "go"}, model=CLAUDE)
    assert outcome.status == "failed" and "malformed stream event" in outcome.error
    [failed] = [e for e in await events_of(store, run_stream(outcome.run_id)) if isinstance(e, RunLlmFailed)]
    assert failed.error_type == "InvalidModelReply" and failed.usage == Tokens(input=30, output=12)
    assert outcome.tokens == failed.usage
    assert await replays_exactly(db_path, outcome.run_id)


async def test_a_run_a_gateway_submits_through_mcp_counts_its_billed_failure_in_the_jobs_tokens(
        store, db_path, monkeypatch):
    """`run.submit` through `gormes mcp` (a process, driven by the mcp SDK client)
    makes an agent job; a worker runs it against the Anthropic stand-in, whose
    first stream fails after message_start. The job's tokens count that turn."""
    queue = await JobQueue.open(store)
    with MessagesServer(require_key="sk-ant-test") as server:
        # the worker (this process) opens the provider from the environment
        monkeypatch.setenv("GORMES_ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("GORMES_ANTHROPIC_API_KEY", "sk-ant-test")
        server.queue(ErrorMidStream(Reply("lost", input_tokens=40)), Reply("It is late.", input_tokens=40,
                                                                           output_tokens=3))
        worker = agent_worker(queue, WorkerConfig(concurrency=1), store=store, log=lambda _: None)
        # a gateway may choose only a model the operator allows (gormes/tools/job_trust.py)
        async with gormes_mcp(db_path, env={"GORMES_GATEWAY_MODELS": CLAUDE}) as client:
            job = await call_ok(client, "run__submit", prompt="What time is it?", model=CLAUDE, tools=["time.now"])
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                with trio.fail_after(60):
                    while (await queue.get(job["id"])).status not in ("completed", "failed", "dead"):
                        await trio.sleep(0.05)
                worker.stop()
            done = await call_ok(client, "job__get", id=job["id"])
            run = await call_ok(client, "run__get", run_id=done["result"]["run_id"])
    assert server.rejections == []
    assert done["status"] == "completed", done["error"]
    [failed] = [e for e in await events_of(store, run_stream(run["run_id"])) if isinstance(e, RunLlmFailed)]
    assert failed.usage == Tokens(input=40, output=1)
    assert done["tokens"]["input"] == run["tokens"]["input"] == 80
    assert done["tokens"]["output"] == run["tokens"]["output"] == 4
    assert (await queue.get(job["id"])).tokens == Tokens(input=80, output=4)
