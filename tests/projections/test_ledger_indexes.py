"""The ledger's indexes (decision 0012): partial where they serve one status, and
an older database's indexes replaced when a queue opens it. Both backends."""

from __future__ import annotations

from typing import Any

from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.batch import claim_sql
from gormes.projections import ledger

# The indexes an older ledger had (before decision 0012), as it made them.
OLD_INDEXES = (
    "CREATE INDEX jobs_claim ON jobs(status, queue, name, priority, created_at)",
    "CREATE INDEX jobs_pick ON jobs(status, priority, created_at, id, name, queue)",
    "CREATE INDEX jobs_delay ON jobs(status, delay_until)",
    "CREATE INDEX jobs_lock ON jobs(status, lock_until)",
    "CREATE INDEX jobs_done ON jobs(status, finished_at)",
    # `jobs_unended` as it was first spelt
    "CREATE INDEX jobs_live ON jobs(created_at, id)"
    " WHERE status NOT IN ('cancelled', 'completed', 'dead', 'failed')",
)
NEW = {index.name for index in ledger.INDEXES if index.table == "jobs"}
REPLACED = {"jobs_waiting", "jobs_delayed", "jobs_status", "jobs_unended"}


def _job_indexes(tx: Any) -> set[str]:
    if getattr(tx, "dialect", "sqlite") == "postgres":
        sql = ("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
               " AND tablename = 'jobs' AND indexname <> 'jobs_pkey'")
    else:
        sql = ("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'"
               " AND sql IS NOT NULL")
    return {name for (name,) in tx.execute(sql).fetchall()}


def _make_old(tx: Any) -> None:
    for name in REPLACED:
        tx.execute(f"DROP INDEX {name}")
    for statement in OLD_INDEXES:
        tx.execute(statement)


async def test_a_new_ledger_has_the_partial_indexes_and_none_retired(store):
    await JobQueue.open(store)
    assert await store.transact(_job_indexes) == NEW


async def test_given_an_older_ledger_when_a_queue_opens_it_then_its_indexes_are_replaced(store, reopen):
    # given a ledger with jobs in it, built with the indexes of an older version
    queue = await JobQueue.open(store)
    waiting = [await queue.submit("a", i) for i in range(3)]
    await store.transact(_make_old)
    retired_of_jobs = {name for name in ledger.RETIRED_INDEXES if name.startswith("jobs_")}
    assert await store.transact(_job_indexes) == (NEW - REPLACED) | retired_of_jobs
    # when a queue opens the database again (another process, say)
    async with reopen(store) as again:
        queue2 = await JobQueue.open(again)
        # then the retired indexes are gone and the new ones there
        assert await again.transact(_job_indexes) == NEW
        # and the queue works as before: claims in order, completes
        jobs = await queue2.claim_many({"a"}, limit=5)
        assert [j.id for j in jobs] == [j.id for j in waiting]
        for job in jobs:
            await queue2.complete(job.id, job.lock_token, job.data)
        assert (await queue2.stats()).by_status["completed"] == 3


async def test_on_sqlite_a_claim_walks_the_waiting_index_in_order_without_sorting(store):
    if getattr(store, "dialect", "sqlite") == "postgres":
        return  # PostgreSQL plans by its statistics; the SQLite planner has none
    await JobQueue.open(store)
    for queues in (None, ["default", "other"]):
        sql, params = claim_sql(["a", "b"], queues)

        def plan(tx: Any, sql: str = sql, params: list[Any] = params) -> list[str]:
            return [row[3] for row in tx.execute(f"EXPLAIN QUERY PLAN {sql}", (*params, 10))]

        steps = await store.transact(plan)
        assert len(steps) == 1 and "INDEX jobs_waiting" in steps[0], steps


async def test_on_sqlite_the_newest_jobs_are_read_from_the_created_index_without_sorting(store):
    if getattr(store, "dialect", "sqlite") == "postgres":
        return  # PostgreSQL plans by its statistics; the SQLite planner has none
    from gormes.actors.jobs.views import select_jobs

    queue = await JobQueue.open(store)
    submitted = [await queue.submit("a", i) for i in range(5)]
    sql = "SELECT * FROM jobs ORDER BY created_at DESC, id DESC LIMIT ?"

    def plan(tx: Any) -> list[str]:
        return [row[3] for row in tx.execute(f"EXPLAIN QUERY PLAN {sql}", (20,))]

    steps = await store.transact(plan)
    assert len(steps) == 1 and "INDEX jobs_created" in steps[0], steps
    newest = await store.transact(lambda tx: select_jobs(tx, None, None, None, 3))
    assert [j.id for j in newest] == [j.id for j in reversed(submitted)][:3]


async def test_on_sqlite_the_live_jobs_are_read_from_the_unended_index_without_sorting(store):
    if getattr(store, "dialect", "sqlite") == "postgres":
        return  # PostgreSQL plans by its statistics; the SQLite planner has none
    queue = await JobQueue.open(store)
    submitted = [await queue.submit("a", i) for i in range(4)]
    [claimed] = await queue.claim_many({"a"}, limit=1)
    await queue.complete(claimed.id, claimed.lock_token, None)
    sql = f"SELECT id FROM jobs WHERE {ledger.LIVE_JOBS} ORDER BY created_at DESC, id DESC LIMIT ?"

    def plan(tx: Any) -> list[str]:
        return [row[3] for row in tx.execute(f"EXPLAIN QUERY PLAN {sql}", (20,))]

    steps = await store.transact(plan)
    assert len(steps) == 1 and "INDEX jobs_unended" in steps[0], steps
    live = await store.transact(lambda tx: [row[0] for row in tx.execute(sql, (20,)).fetchall()])
    assert live == [j.id for j in reversed(submitted) if j.id != claimed.id]
