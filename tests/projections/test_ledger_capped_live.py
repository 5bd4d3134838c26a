"""`jobs_capped_live` (decision 0070's addendum): the live jobs of the capped trust
classes, by class. The live-jobs cap's count, made under the write lock at every
gateway or child agent submit, reads it, and so reads its class's jobs and no one
else's, on both backends; an older ledger gets it when a queue opens it; and the
count follows a job through every transition, out when it ends, back in when it is
retried."""

from __future__ import annotations

from typing import Any

import pytest

from gormes.actors.jobs.queue import JobQueue
from gormes.events.jobs import Submitter
from gormes.events.job_machine import LIVE
from gormes.projections import ledger
from gormes.tools import job_trust

GATEWAY = Submitter(trust="gateway", caller="mcp:a", scope="chat:mcp-a")
OTHER_GATEWAY = Submitter(trust="gateway", caller="mcp:b", scope="chat:mcp-b")
CHILD = Submitter(trust="child-agent", caller="run-r1", scope="project:default")
OPERATOR = Submitter(trust="operator", caller="cli")
SYSTEM = Submitter(trust="system", caller="cron")
INDEX = "jobs_capped_live"


class Recording:
    """A transaction that keeps the SQL run through it (and says its dialect, as the
    transaction does), so a test can ask the database for the plan of exactly the
    statement the code ran."""

    def __init__(self, tx: Any) -> None:
        self.tx = tx
        self.dialect = getattr(tx, "dialect", "sqlite")
        self.statements: list[tuple[str, tuple]] = []

    def execute(self, sql: str, params: tuple = ()) -> Any:
        self.statements.append((sql, params))
        return self.tx.execute(sql, params)


def count_and_plan(tx: Any, trust: str) -> tuple[int, str]:
    """`live_count_in`'s count, and the database's plan of the statement it ran."""
    recording = Recording(tx)
    n = JobQueue.live_count_in(recording, trust)
    [(sql, params)] = recording.statements
    if recording.dialect == "postgres":
        tx.execute("SET LOCAL enable_seqscan = off")  # its planner has no statistics on so few rows
        return n, "\n".join(r[0] for r in tx.execute(f"EXPLAIN {sql}", params).fetchall())
    return n, "\n".join(r[3] for r in tx.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall())


def recount(tx: Any) -> dict[str, int]:
    """The live jobs by class, counted in Python from every row of the table."""
    import json

    counts: dict[str, int] = {}
    for status, submitter in tx.execute("SELECT status, submitter FROM jobs").fetchall():
        if status in LIVE and submitter:
            trust = json.loads(submitter)["trust"]
            counts[trust] = counts.get(trust, 0) + 1
    return counts


async def submit_everyones(queue: JobQueue) -> None:
    for n in range(3):
        await queue.submit("echo", n, submitter=GATEWAY)
    await queue.submit("echo", None, submitter=OTHER_GATEWAY)  # another name, the same class
    await queue.submit("echo", None, submitter=CHILD)
    for n in range(4):
        await queue.submit("echo", n, submitter=OPERATOR)
    await queue.submit("echo", None, submitter=SYSTEM)
    await queue.submit("echo", None)  # a Python caller's: no submitter, no class's


async def test_a_capped_classs_count_is_read_from_its_index(store):
    queue = await JobQueue.open(store)
    await submit_everyones(queue)
    for trust, held in (("gateway", 4), ("child-agent", 1)):
        n, plan = await store.transact(lambda tx, trust=trust: count_and_plan(tx, trust))
        assert n == held
        assert INDEX in plan, plan
        if getattr(store, "dialect", "sqlite") == "sqlite":
            assert len(plan.splitlines()) == 1 and "SEARCH jobs USING INDEX jobs_capped_live" in plan, plan


async def test_the_uncapped_classes_are_counted_from_the_table_not_the_index(store):
    """The operator's and the system's jobs never enter the index: their count (no cap
    asks for it) still reads every live job."""
    queue = await JobQueue.open(store)
    await submit_everyones(queue)
    assert (await queue.live_count("operator"), await queue.live_count("system")) == (4, 1)
    for trust in ledger.UNCAPPED:
        _, plan = await store.transact(lambda tx, trust=trust: count_and_plan(tx, trust))
        assert INDEX not in plan, plan


def test_the_uncapped_classes_are_those_the_cap_lets_pass() -> None:
    # Were they to part, the count would stay exact (see ledger.UNCAPPED), but a
    # privileged class's jobs would be indexed for nothing, or a capped class's
    # count would read every live job again.
    assert frozenset(ledger.UNCAPPED) == job_trust.PRIVILEGED


async def test_the_count_follows_a_job_through_every_transition(store):
    """After each step the index's count is the table's: a claim, a renewal, progress,
    tokens, a pause and a resume leave a job counted; a completion, a death, a
    cancellation and a removal take it out; a retry of a dead job puts it back."""
    queue = await JobQueue.open(store)
    await queue.submit("echo", None, submitter=OPERATOR)

    async def check(expected: int) -> None:
        counted = await store.transact(lambda tx: JobQueue.live_count_in(tx, "gateway"))
        table = await store.transact(recount)
        assert counted == table.get("gateway", 0) == expected
        assert table.get("operator") == 1

    jobs = [await queue.submit("echo", n, {"max_attempts": 1}, submitter=GATEWAY) for n in range(4)]
    removed = await queue.submit("echo", None, {"remove_on_complete": True}, submitter=GATEWAY)
    await check(5)
    claimed = {job.id: job for job in await queue.claim_many({"echo"}, limit=10)}
    await check(5)
    first, second, third, fourth = (claimed[job.id] for job in jobs)
    assert await queue.renew(first.id, first.lock_token)
    await queue.progress(first.id, first.lock_token, {"half": True})
    await queue.pause(second.id)
    await queue.resume(second.id)
    await check(5)
    await queue.complete(first.id, first.lock_token, "done")
    await check(4)
    await queue.fail(third.id, third.lock_token, "boom")  # one attempt: dead
    await check(3)
    await queue.cancel(fourth.id)
    await check(2)
    await queue.complete(removed.id, claimed[removed.id].lock_token, None)  # out of the ledger
    assert await queue.get(removed.id) is None
    await check(1)
    await queue.retry(third.id)  # waiting again: counted again
    await check(2)


async def test_given_a_ledger_made_before_the_index_when_a_queue_opens_it_then_it_is_built(store, reopen):
    # given a ledger with jobs in it, as a gormes before the index left it
    queue = await JobQueue.open(store)
    await submit_everyones(queue)
    await store.transact(lambda tx: tx.execute(f"DROP INDEX {INDEX}"))
    _, plan = await store.transact(lambda tx: count_and_plan(tx, "gateway"))
    assert INDEX not in plan
    # when a queue opens the database again (another process, say)
    async with reopen(store) as again:
        await JobQueue.open(again)
        # then the index is there, holding the jobs recorded before it, and read
        n, plan = await again.transact(lambda tx: count_and_plan(tx, "gateway"))
        assert n == 4 and INDEX in plan, plan
        assert len(await JobQueue(again).list(limit=100)) == 11


@pytest.mark.parametrize("name", ["sqlite", "postgres"])
def test_the_index_says_the_trust_class_as_the_count_does(name: str) -> None:
    """A partial index is used only by a query that says its WHERE: the index's DDL
    and the count are written from the same terms."""
    [index] = [i for i in ledger.INDEXES if i.name == INDEX]
    ddl = ledger.index_sql(index, name)
    assert ledger.TRUST not in ddl
    assert ddl.endswith(f"({ledger.submitter_trust(name)}) WHERE {ledger.capped_live(name)}")
