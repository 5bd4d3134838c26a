"""`job.submit`'s `max_waiting` as a gauge of other callers' queue depth.

`max_waiting: N` answers a submission with the queue's newest waiting job once the
queue holds N waiting jobs. A gateway was not shown another caller's job (it was
refused, "queue ... is full"), but whether it was refused or given a new job told
it whether the queue held at least N waiting jobs of anyone: a probe with N = 1,
2, 4, ... read the depth of the operator's queue, and of every other gateway's
work on it, one audited call at a time. A gateway's or child agent's `max_waiting`
now counts, and answers with, its own waiting jobs only (decision 0076); the
operator's counts the queue, as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_helpers import audit_events, call_ok, gormes_mcp
from pg_helpers import backend_store

from gormes.actors.jobs.queue import JobQueue, Submitter
from gormes.events.sqlite import SQLiteEventStore
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller
from gormes.tools.builtin import default_registry

OPERATOR = Caller(trust="operator", id="cli")
ALICE = Caller(trust="gateway", id="mcp:alice")
MALLORY = Caller(trust="gateway", id="mcp:mallory")
ALICE_RUN = Caller(trust="gateway", id="run-1", run_id="1", scope="chat:mcp-alice")  # acts for alice


def _probe(n: int) -> dict:
    return {"name": "probe", "options": {"max_waiting": n}}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_gateways_max_waiting_counts_its_own_waiting_jobs_only(backend: str, db_path: Path):
    """With the operator's and alice's jobs waiting, mallory's probes at every depth
    up to theirs are new jobs of its own: it learns nothing of their jobs. Alice's own
    probe (from her run, one owner with her) is answered with her newest waiting job."""
    async with backend_store(backend, db_path) as store:
        queue = await JobQueue.open(store)
        executor = Executor(default_registry(), store, jobs=queue)
        for n in range(3):
            await executor.call("job.submit", {"name": "report", "data": {"n": n}}, OPERATOR)
        alices = [await executor.call("job.submit", {"name": "echo", "data": {"n": n}}, ALICE) for n in range(2)]

        first = await executor.call("job.submit", _probe(1), MALLORY)
        assert not first.coalesced and first.submitter.caller == "mcp:mallory"
        assert await queue.get(first.id) is not None  # recorded: a job of its own
        # Five waiting jobs of others, one of its own: a max of 2 takes a second job...
        second = await executor.call("job.submit", _probe(2), MALLORY)
        assert not second.coalesced and second.id != first.id
        # ...and at its own two, it is given its own newest, nobody else's.
        again = await executor.call("job.submit", _probe(2), MALLORY)
        assert again.coalesced and again.id == second.id

        mine = await executor.call("job.submit", _probe(2), ALICE_RUN)
        assert mine.coalesced and mine.id == max(job.id for job in alices)
        assert [a.outcome for a in await audit_events(store) if a.operation == "job.submit"] == ["ok"] * 9


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_the_operators_max_waiting_counts_the_whole_queue(backend: str, db_path: Path):
    """The operator's `max_waiting` is admission control for the queue: every
    waiting job of it counts, a gateway's too, and the answer is the newest."""
    async with backend_store(backend, db_path) as store:
        queue = await JobQueue.open(store)
        executor = Executor(default_registry(), store, jobs=queue)
        await executor.call("job.submit", {"name": "report"}, OPERATOR)
        gateways = await executor.call("job.submit", {"name": "echo"}, MALLORY)
        full = await executor.call("job.submit", _probe(2), OPERATOR)
        assert full.coalesced and full.id == gateways.id
        room = await executor.call("job.submit", _probe(3), OPERATOR)
        assert not room.coalesced and room.submitter.trust == "operator"


async def test_over_mcp_a_second_gateway_learns_nothing_of_the_firsts_waiting_jobs(db_path: Path):
    """Two `gormes mcp` clients of different names on one database: `second`'s
    max_waiting 1 probe, with `first`'s job waiting, makes a job of its own; before,
    it was refused ("queue 'default' is full"), which told it a job waited."""
    async with gormes_mcp(db_path, client_name="first") as client:
        theirs = await call_ok(client, "job__submit", name="echo", data={"secret": "first's"})
    async with gormes_mcp(db_path, client_name="second") as client:
        probe = await call_ok(client, "job__submit", name="probe", options={"max_waiting": 1})
        again = await call_ok(client, "job__submit", name="probe", options={"max_waiting": 1})
    assert not probe["coalesced"] and probe["id"] != theirs["id"]
    assert again["coalesced"] and again["id"] == probe["id"]  # its own, at its own max
    async with SQLiteEventStore.open(db_path) as store:
        queue = await JobQueue.open(store)
        waiting = await queue.list(status="waiting")
        submitters = {job.submitter for job in waiting}
    assert len(waiting) == 2 and submitters == {
        Submitter(trust="gateway", caller="mcp:first", scope="chat:mcp-first"),
        Submitter(trust="gateway", caller="mcp:second", scope="chat:mcp-second"),
    }
