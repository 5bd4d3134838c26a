"""A Snapshot read from a real database, populated through the JobQueue and the store."""

from __future__ import annotations

import time

import msgspec
import pytest

from gormes.actors.jobs.heartbeat import Heartbeat
from gormes.providers.pricing import Price, PricingTable
from gormes.actors.jobs.queue import JobQueue
from gormes.dashboard.app import open_views
from gormes.dashboard.model import BREAKER_ERROR
from gormes.dashboard.read import read_snapshot
from gormes.actors.agent_jobs.attempts import AGENT_RUN
from gormes.events.jobs import Tokens, TranscriptEntry
from gormes.events.runs import (
    RecordedReply,
    RunChildSpawned,
    RunCompleted,
    RunLlmTurn,
    RunProgressed,
    RunStarted,
    RunToolCalled,
    run_stream,
)

PRICES = PricingTable({"gpt-test": Price(input=1.0, output=2.0)})  # $ per 1M tokens


def turn(seq: int, model: str, tokens_in: int, tokens_out: int) -> RunLlmTurn:
    return RunLlmTurn(seq=seq, request_hash=f"h{seq}", model=model, message_count=1,
                      reply=RecordedReply(content="ok"),
                      usage=Tokens(input=tokens_in, output=tokens_out))


def tool(seq: int, operation: str) -> RunToolCalled:
    return RunToolCalled(seq=seq, operation=operation, arguments="{}", args_hash="a", outcome="ok")


async def record_run(store, run_id: str, *events, job_id=None, parent=None, depth=0, model="gpt-test"):
    started = RunStarted(run_id=run_id, handler="agent", handler_version="v1", model=model,
                         job_id=job_id, parent_run_id=parent, depth=depth)
    await store.append(run_stream(run_id), [started, *events], expected_version=0)


@pytest.fixture
async def populated(store):
    """Jobs in every interesting status over two queues, two workers, runs with turns."""
    queue = await JobQueue.open(store)
    ids = {}
    ids["waiting"] = (await queue.submit("echo", {"n": 1})).id
    ids["paused"] = (await queue.submit("echo", {"n": 2}, {"queue": "fast"})).id
    await queue.pause(ids["paused"])
    ids["cancelled"] = (await queue.submit("echo", {"n": 3})).id
    await queue.cancel(ids["cancelled"])
    ids["delayed"] = (await queue.submit("echo", {"n": 4}, {"queue": "fast", "delay_ms": 600_000})).id
    ids["breaker"] = (await queue.submit("big", {"n": 5}, {"queue": "fast"})).id
    big = await queue.claim({"big"}, worker_id="w-live")
    await queue.fail(big.id, big.lock_token, BREAKER_ERROR, unrecoverable=True)
    ids["agent"] = (await queue.submit("agent", {"prompt": "hi"})).id
    agent = await queue.claim({"agent"}, worker_id="w-live")
    await queue.progress(agent.id, agent.lock_token, {"turn": 2})
    await queue.add_tokens(agent.id, agent.lock_token, input=3500, output=1200)
    # the attempt names its run in the job's log, as the agent job handler does
    await queue.log(agent.id, agent.lock_token, TranscriptEntry(text="run R1", data={AGENT_RUN: "R1"}))

    await record_run(store, "R1", turn(1, "gpt-test", 1000, 500), tool(2, "fs.read"),
                     RunProgressed(seq=3, progress={"phase": "reading"}),
                     turn(4, "gpt-test", 2000, 500), tool(5, "fs.grep"),
                     RunChildSpawned(seq=6, child_run_id="R2", handler="agent"), job_id=agent.id)
    await record_run(store, "R2", turn(1, "mystery-model", 500, 200), tool(2, "time.now"),
                     job_id=agent.id, parent="R1", depth=1, model="mystery-model")
    await record_run(store, "R0", turn(1, "gpt-test", 10, 10), RunCompleted(result="done"))

    live = Heartbeat(store, "w-live", {"pid": 11, "host": "h", "concurrency": 4, "queues": ["fast"]})
    await live.beat()
    gone = Heartbeat(store, "w-gone", {"pid": 12, "host": "h", "concurrency": 2,
                                       "governor": {"limit": 1, "cpu_percent": 97.5}})
    await gone.beat()
    await gone.stopped()
    await open_views(store)
    return ids


async def test_counts_by_status_and_queue(store, populated):
    snap = await read_snapshot(store, pricing=PRICES)
    assert snap.total_jobs == 6
    assert {s: n for s, n in snap.by_status.items() if n} == {
        "waiting": 1, "paused": 1, "cancelled": 1, "delayed": 1, "dead": 1, "active": 1,
    }
    queues = {q.queue: {s: n for s, n in q.counts.items() if n} for q in snap.by_queue}
    assert queues == {
        "default": {"waiting": 1, "cancelled": 1, "active": 1},
        "fast": {"paused": 1, "delayed": 1, "dead": 1},
    }
    assert snap.breaker_trips == 1
    assert snap.tokens == Tokens(input=3500, output=1200)
    assert snap.head == await store.head()


async def test_jobs_live_first_with_their_run_tool_tokens_and_cost(store, populated):
    snap = await read_snapshot(store, pricing=PRICES)
    statuses = [j.status for j in snap.jobs]
    assert statuses[:4] == ["active", "waiting", "delayed", "paused"]
    assert set(statuses[4:]) == {"dead", "cancelled"}
    agent = snap.jobs[0]
    assert agent.id == populated["agent"] and agent.worker_id == "w-live"
    assert agent.progress == '{"turn":2}'
    assert agent.tokens == Tokens(input=3500, output=1200)
    assert agent.run_id == "R1" and agent.last_tool == "fs.grep"
    assert agent.cost is None  # its subagent ran on a model without a price: unknown, not $0
    waiting = next(j for j in snap.jobs if j.id == populated["waiting"])
    assert waiting.run_id is None and waiting.cost is None


async def test_active_runs_with_progress_last_tool_tokens_and_exact_cost(store, populated):
    snap = await read_snapshot(store, pricing=PRICES)
    runs = {r.run_id: r for r in snap.runs}
    assert set(runs) == {"R1", "R2"}  # R0 completed: not active
    r1 = runs["R1"]
    assert r1.status == "running" and r1.iterations == 2 and r1.last_tool == "fs.grep"
    assert r1.progress == '{"phase":"reading"}'
    assert r1.tokens == Tokens(input=3000, output=1000)
    assert r1.cost == pytest.approx((3000 * 1.0 + 1000 * 2.0) / 1e6)
    r2 = runs["R2"]
    assert r2.depth == 1 and r2.parent_run_id == "R1" and r2.job_id == populated["agent"]
    assert r2.cost is None and r2.last_tool == "time.now"


async def test_job_cost_is_the_sum_of_its_runs_when_all_are_priced(store, populated):
    everything = PricingTable({"gpt-test": Price(input=1.0, output=2.0),
                               "mystery-model": Price(input=10.0, output=10.0)})
    snap = await read_snapshot(store, pricing=everything)
    agent = snap.jobs[0]
    assert agent.cost == pytest.approx((3000 + 2000) / 1e6 + (500 + 200) * 10 / 1e6)


async def test_workers_alive_or_gone_with_active_jobs_and_governor(store, populated):
    snap = await read_snapshot(store, pricing=PRICES, now=time.time())
    workers = {w.worker_id: w for w in snap.workers}
    live, gone = workers["w-live"], workers["w-gone"]
    assert live.alive and live.active_jobs == 1 and live.concurrency == 4
    assert live.queues == ("fast",) and live.governor is None
    assert not gone.alive and gone.governor is not None
    assert gone.governor.limit == 1 and gone.governor.cpu_percent == 97.5
    assert snap.live_workers == 1
    later = await read_snapshot(store, pricing=PRICES, now=time.time() + 3600)
    assert not any(w.alive for w in later.workers)  # an old heartbeat is no live worker


async def test_the_snapshot_follows_a_pause(store, populated):
    queue = JobQueue(store)
    await queue.pause(populated["waiting"])
    snap = await read_snapshot(store, pricing=PRICES)
    assert next(j for j in snap.jobs if j.id == populated["waiting"]).status == "paused"
    assert snap.by_status["paused"] == 2 and snap.by_status["waiting"] == 0


async def test_a_database_without_projection_tables_reads_as_empty(store):
    snap = await read_snapshot(store, pricing=PRICES)
    assert snap.total_jobs == 0 and snap.jobs == () and snap.runs == () and snap.workers == ()


async def test_an_active_run_whose_process_is_gone_is_marked(store, populated):
    from gormes.actors.runs.process import this_process

    here = this_process()
    for run_id, process in (("alive", here),
                            ("killed", msgspec.structs.replace(here, started_at=here.started_at - 60))):
        await store.append(run_stream(run_id), [RunStarted(
            run_id=run_id, handler="agent", handler_version="v1", process=process)], expected_version=0)
    await open_views(store)
    runs = {r.run_id: r for r in (await read_snapshot(store, pricing=PRICES)).runs}
    assert (runs["alive"].process, runs["killed"].process, runs["R1"].process) == ("alive", "gone", None)
