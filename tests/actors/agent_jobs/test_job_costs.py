"""A job's cost counts each model turn of its runs once, where it was made; a run's
cost is its own turns (a copied prefix included), on both backends."""

from __future__ import annotations

import pytest
from pg_helpers import backend, store_on_both_backends  # noqa: F401 (fixtures)

from gormes.actors.agent_jobs.attempts import AGENT_RUN
from gormes.actors.agent_jobs.costs import job_costs, job_runs, ledger_cost, ledger_costs
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.runs.costs import live_turns, run_costs
from gormes.events.jobs import Tokens, TranscriptEntry
from gormes.events.runs import (
    ForkOrigin,
    RecordedReply,
    RunChildSpawned,
    RunLlmTurn,
    RunStarted,
    RunToolCalled,
    run_stream,
)
from gormes.providers.pricing import Price, PricingTable

TABLE = PricingTable({"m-a": Price(input=1.0, output=2.0), "m-b": Price(input=3.0, output=5.0, cache_read=0.5)})


def turn(seq: int, model: str, i: int, o: int, c: int = 0) -> RunLlmTurn:
    return RunLlmTurn(seq=seq, request_hash=f"h{seq}", model=model, message_count=1,
                      reply=RecordedReply(content="ok"), usage=Tokens(input=i, output=o, cache_read=c))


def tool(seq: int) -> RunToolCalled:
    return RunToolCalled(seq=seq, operation="time.now", arguments="{}", args_hash="a", outcome="ok")


async def record(store, run_id: str, *events, job_id: str, parent: str | None = None,
                 resumed_from: ForkOrigin | None = None) -> None:
    started = RunStarted(run_id=run_id, handler="agent", handler_version="v1", model="m-a",
                         job_id=job_id, parent_run_id=parent, depth=0 if parent is None else 1,
                         resumed_from=resumed_from)
    await store.append(run_stream(run_id), [started, *events], expected_version=0)


LOCKS: dict[str, str] = {}  # job id -> the lock token its (one) claim got


async def agent_job(queue: JobQueue, *runs: str) -> str:
    job = await queue.submit("agent", {"prompt": "hi"})
    claimed = await queue.claim({"agent"}, worker_id="w")
    LOCKS[job.id] = claimed.lock_token
    for run_id in runs:  # each attempt names its run in the job's log before starting it
        await queue.log(job.id, claimed.lock_token, TranscriptEntry(text=f"run {run_id}", data={AGENT_RUN: run_id}))
    return job.id


async def given(queue: JobQueue, job_id: str, made: list[tuple[str, Tokens]]) -> None:
    """What the job's runs reported of the turns they `made`, each with its model
    (the ledger's per-model totals, which `ledger_cost` prices, are folded from these)."""
    for model, t in made:
        await queue.add_tokens(job_id, LOCKS[job_id], input=t.input, output=t.output, cache_read=t.cache_read,
                               model=model)


async def test_a_resumed_run_s_copied_turns_count_once_for_the_job(store):
    queue = await JobQueue.open(store)
    job = await agent_job(queue, "R1", "R2")
    first = [turn(1, "m-a", 1000, 100), tool(2), turn(3, "m-b", 2000, 200, 500)]
    await record(store, "R1", *first, job_id=job)
    cut = (await store.read_stream(run_stream("R1")))[-1].position  # the attempt was lost after seq 3
    # the next attempt resumes R1: its three observations are copied, then it goes on live
    await record(store, "R2", *first, turn(4, "m-a", 300, 30),
                 RunChildSpawned(seq=5, child_run_id="C1", handler="agent"),
                 job_id=job, resumed_from=ForkOrigin(run_id="R1", position=cut))
    await record(store, "C1", turn(1, "m-b", 40, 4), job_id=job, parent="R2")

    made = [("m-a", Tokens(input=1000, output=100)), ("m-b", Tokens(input=2000, output=200, cache_read=500)),
            ("m-a", Tokens(input=300, output=30)), ("m-b", Tokens(input=40, output=4))]
    costs = await store.read_sql(lambda conn: job_costs(conn, [job], TABLE))
    assert costs == {job: TABLE.total(made)}
    assert await store.read_sql(lambda conn: job_runs(conn, [job])) == {"R1": job, "R2": job, "C1": job}
    live = await store.read_sql(lambda conn: live_turns(conn, ["R2"]))
    assert [t.seq for t in live] == [4]
    # a run's own cost is its timeline's: R2's copied turns are in it, its subagent's are not
    runs = await store.read_sql(lambda conn: run_costs(conn, ["R1", "R2", "C1", "NONE"], TABLE))
    assert runs == {
        "R1": TABLE.total(made[:2]),
        "R2": TABLE.total([*made[:2], made[2]]),
        "C1": TABLE.total(made[3:]),
    }
    # what every job cost together is priced from the ledger's per-model totals:
    # the same figure, from what the job's runs reported with their model
    await given(queue, job, made)
    assert await store.read_sql(lambda conn: ledger_cost(conn, TABLE)) == costs[job]


async def test_an_unknown_price_is_none_and_a_job_without_model_turns_has_no_cost(store):
    queue = await JobQueue.open(store)
    priced = await agent_job(queue, "P1")
    await record(store, "P1", turn(1, "m-a", 10, 10), job_id=priced)
    mystery = await agent_job(queue, "M1")
    await record(store, "M1", turn(1, "m-a", 10, 10), RunChildSpawned(seq=2, child_run_id="M2", handler="agent"),
                 job_id=mystery)
    await record(store, "M2", turn(1, "mystery-model", 10, 10), job_id=mystery, parent="M1")
    plain = (await queue.submit("echo", {})).id
    claimed = await queue.claim({"echo"}, worker_id="w")
    await queue.add_tokens(plain, claimed.lock_token, input=500, output=50)  # tokens with no model

    costs = await store.read_sql(lambda conn: job_costs(conn, [priced, mystery, plain], TABLE))
    assert costs == {priced: pytest.approx((10 * 1.0 + 10 * 2.0) / 1e6), mystery: None}
    await given(queue, priced, [("m-a", Tokens(input=10, output=10))])
    # tokens with no model are not priced: they are counted apart
    totals = await store.read_sql(lambda conn: ledger_costs(conn, TABLE))
    assert totals.cost == pytest.approx(30 / 1e6) and totals.unpriced == Tokens(input=500, output=50)
    assert totals.pricing == TABLE.version
    await given(queue, mystery, [("m-a", Tokens(input=10, output=10)), ("mystery-model", Tokens(input=10, output=10))])
    assert await store.read_sql(lambda conn: ledger_cost(conn, TABLE)) is None


async def test_a_ledger_with_no_model_turns_costs_nothing(store):
    queue = await JobQueue.open(store)
    await queue.submit("echo", {})
    assert await store.read_sql(lambda conn: ledger_cost(conn, TABLE)) == 0.0
