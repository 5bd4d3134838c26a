"""Every kind of token a provider reports reaches the job's ledger with its model
(decision 0035): OpenAI's reasoning tokens (`completion_tokens_details`) from the
wire, and prompt-cache writes, through the run's recorded turn and the job's
token deltas to the ledger's columns and its per-model rows."""

from __future__ import annotations

import sys
from pathlib import Path

import trio
from agent_worker import agent_worker
from run_helpers import run_events, wait_until

sys.path.insert(0, str(Path(__file__).parents[2] / "providers"))
from openai_server import ChatServer, TextReply  # noqa: E402

from gormes.actors.agent_jobs.costs import job_spending  # noqa: E402
from gormes.actors.jobs.queue import JobQueue  # noqa: E402
from gormes.actors.jobs.worker import WorkerConfig  # noqa: E402
from gormes.events.jobs import Tokens  # noqa: E402
from gormes.events.runs import RunLlmTurn  # noqa: E402
from gormes.providers.pricing import Price, PricingTable  # noqa: E402

TABLE = PricingTable({"gpt-test": Price(input=1.0, output=4.0, cache_read=0.5)}, "t")


async def test_reasoning_tokens_flow_from_the_wire_to_the_ledger(store, monkeypatch) -> None:
    with ChatServer() as server:
        server.queue(TextReply("42", prompt_tokens=120, completion_tokens=30, cached_tokens=100,
                               reasoning_tokens=24))
        monkeypatch.setenv("GORMES_OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("GORMES_OPENAI_API_KEY", "sk-test")
        queue = await JobQueue.open(store)
        job = await queue.submit("agent", {"prompt": "think", "model": "openai:gpt-test"})
        worker = agent_worker(queue, WorkerConfig(concurrency=1), store=store, log=lambda _: None)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await wait_until(lambda: _terminal(queue, job.id), timeout=30)
            worker.stop()
            await worker.wait_stopped()
    done = await queue.get(job.id)
    assert done.status == "completed", done.error
    run_id = done.result["run_id"]
    (turn,) = [e for e in await run_events(store, run_id) if isinstance(e, RunLlmTurn)]
    expected = Tokens(input=120, output=30, cache_read=100, reasoning=24)
    assert turn.usage == expected
    assert done.tokens == expected
    (spent,) = [(await store.read_sql(lambda conn: job_spending(conn, [job.id], TABLE)))[job.id]]
    assert spent.spent == expected and spent.unpriced == Tokens()
    # reasoning is part of output, priced as output
    assert spent.cost == TABLE.cost("gpt-test", expected) == (20 * 1.0 + 100 * 0.5 + 30 * 4.0) / 1e6


async def _terminal(queue: JobQueue, job_id: str) -> bool:
    job = await queue.get(job_id)
    return job is not None and job.status in ("completed", "failed", "dead", "cancelled")
