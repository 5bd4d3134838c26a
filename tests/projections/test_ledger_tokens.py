"""Tokens that add up (decision 0035), on both backends: the ledger keeps what each
job spent per model and the part its retried, stalled or abandoned attempts
wasted; a child job's tokens reach its parent whatever its outcome; cache writes
and reasoning tokens are kept; the totals equal a rebuild's, and a version-4
ledger is migrated to exactly its rebuild."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from typing import Any

import pytest
from pg_helpers import backend, store_on_both_backends  # noqa: F401 (fixtures)

from gormes.actors.agent_jobs.costs import job_spending, ledger_costs
from gormes.actors.jobs.queue import JobQueue
from gormes.events.jobs import Tokens, TranscriptEntry
from gormes.events.sqlite import SQLiteEventStore
from gormes.projections import ledger, ledger_tokens
from gormes.providers.pricing import Price, PricingTable

TABLE = PricingTable({"m": Price(input=1.0, output=2.0), "n": Price(input=10.0, output=20.0)}, "test-1")


class Clock:
    t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


async def token_rows(store: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the token tables (and the jobs' token columns), in key order."""
    kinds = ", ".join(f"tokens_{k}" for k in ("input", "output", "cache_read", "cache_write", "reasoning"))

    def read(conn: Any) -> dict[str, list[tuple[Any, ...]]]:
        return {
            table: [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()]
            for table, order in ((ledger_tokens.JOB_TABLE, "job_id, model"), (ledger_tokens.TOTALS_TABLE, "model"))
        } | {"jobs": [tuple(r) for r in conn.execute(f"SELECT id, {kinds} FROM jobs ORDER BY id").fetchall()]}

    return await store.read_sql(read)


async def spending(store: Any, job_id: str) -> Any:
    return (await store.read_sql(lambda conn: job_spending(conn, [job_id], TABLE)))[job_id]


async def test_a_retried_attempt_s_tokens_are_wasted_and_still_spent(store):
    clock = Clock()
    queue = await JobQueue.open(store, clock=clock)
    job = await queue.submit("work", options={"max_attempts": 3, "backoff": {"kind": "fixed", "delay_ms": 10,
                                                                            "jitter": 0}})
    first = await queue.claim({"work"})
    await queue.add_tokens(job.id, first.lock_token, input=100, output=10, model="m")
    await queue.add_tokens(job.id, first.lock_token, input=7, model=None)  # a handler's own report
    await queue.fail(job.id, first.lock_token, "boom")  # retried: delayed
    clock.t += 1
    second = await queue.claim({"work"})
    assert second is not None and second.id == job.id
    await queue.add_tokens(job.id, second.lock_token, input=50, output=5, model="m")
    await queue.complete(job.id, second.lock_token)

    spent = await spending(store, job.id)
    assert spent.spent == Tokens(input=157, output=15)
    assert spent.wasted == Tokens(input=107, output=10)  # the first attempt's, model or not
    assert spent.cost == pytest.approx((150 * 1.0 + 15 * 2.0) / 1e6)  # the model's tokens priced
    assert spent.wasted_cost == pytest.approx((100 * 1.0 + 10 * 2.0) / 1e6)
    assert spent.unpriced == Tokens(input=7)
    totals = await store.read_sql(lambda conn: ledger_costs(conn, TABLE))
    assert (totals.spent, totals.wasted, totals.cost, totals.pricing) == (spent.spent, spent.wasted, spent.cost,
                                                                         "test-1")
    stats = await queue.stats()
    assert (stats.tokens, stats.wasted) == (spent.spent, spent.wasted)
    assert (await queue.get(job.id)).tokens == Tokens(input=157, output=15)

    before = await token_rows(store)
    await ledger.rebuild(store)
    assert await token_rows(store) == before


async def test_a_stalled_attempt_is_wasted_unless_the_next_resumes_its_run(store):
    clock = Clock()
    queue = await JobQueue.open(store, clock=clock)
    resumed = await queue.submit("agentish")
    fresh = await queue.submit("agentish")
    for job in (resumed, fresh):
        claimed = await queue.claim({"agentish"}, lease_ms=100)
        assert claimed.id == job.id
        await queue.log(job.id, claimed.lock_token, TranscriptEntry(text="run", data={"agent_run": f"R-{job.id}"}))
        await queue.add_tokens(job.id, claimed.lock_token, input=40, output=4, model="n")
    clock.t += 1
    assert set(await queue.sweep_stalled(grace_ms=50)) == {resumed.id, fresh.id}
    assert (await spending(store, resumed.id)).wasted == Tokens(input=40, output=4)
    for job in (resumed, fresh):
        claimed = await queue.claim({"agentish"})
        data = {"agent_run": f"R2-{job.id}"}
        if job is resumed:  # the agent job's next attempt names the run it resumes
            data["resumes"] = f"R-{job.id}"
        await queue.log(job.id, claimed.lock_token, TranscriptEntry(text="run", data=data))
        await queue.add_tokens(job.id, claimed.lock_token, input=1, output=1, model="n")
        await queue.complete(job.id, claimed.lock_token)
    assert (await spending(store, resumed.id)).wasted == Tokens()  # its turns were served, not redone
    assert (await spending(store, fresh.id)).wasted == Tokens(input=40, output=4)
    totals = await store.read_sql(lambda conn: ledger_costs(conn, TABLE))
    assert totals.spent == Tokens(input=82, output=10) and totals.wasted == Tokens(input=40, output=4)

    before = await token_rows(store)
    await ledger.rebuild(store)
    assert await token_rows(store) == before


@pytest.mark.parametrize("outcome", ["failed under ignore", "dead", "cancelled"])
async def test_a_child_job_s_tokens_reach_its_parent_whatever_its_outcome(store, outcome):
    clock = Clock()
    queue = await JobQueue.open(store, clock=clock)
    parent = await queue.submit("parent")
    held = await queue.claim({"parent"})
    child = await queue.submit("child", options={"parent_id": parent.id, "on_child_fail": "ignore",
                                                 "max_attempts": 1})
    await queue.add_tokens(parent.id, held.lock_token, input=10, output=1, model="m")
    await queue.complete(parent.id, held.lock_token)  # waits for its child
    claimed = await queue.claim({"child"})
    await queue.add_tokens(child.id, claimed.lock_token, input=300, output=30, cache_read=100, cache_write=50,
                           reasoning=20, model="m")
    if outcome == "failed under ignore":
        await queue.fail(child.id, claimed.lock_token, "no")
    elif outcome == "dead":
        await queue.fail(child.id, claimed.lock_token, "no", unrecoverable=True)
    else:
        await queue.cancel(child.id)
    assert (await queue.get(child.id)).status in ("failed", "dead", "cancelled")

    child_tokens = Tokens(input=300, output=30, cache_read=100, cache_write=50, reasoning=20)
    assert (await queue.get(parent.id)).tokens == Tokens(input=10, output=1) + child_tokens
    # counted once in the totals: the roll-up is the child's own row already
    stats = await queue.stats()
    assert stats.tokens == Tokens(input=10, output=1) + child_tokens
    before = await token_rows(store)
    await ledger.rebuild(store)
    assert await token_rows(store) == before


async def test_a_version_4_ledger_is_migrated_to_its_rebuild(tmp_path):
    db = tmp_path / "gormes.db"
    clock = Clock()
    async with SQLiteEventStore.open(db) as store:
        queue = await JobQueue.open(store, clock=clock)
        job = await queue.submit("work")
        claimed = await queue.claim({"work"})
        await queue.add_tokens(job.id, claimed.lock_token, input=100, output=10, model="m")
        await queue.release(job.id, claimed.lock_token, "shutdown")
        expected = await token_rows(store)
    # what a version-4 ledger held: no token tables, no columns for the new kinds
    with sqlite3.connect(db) as conn:
        conn.execute(f"DROP TABLE {ledger_tokens.JOB_TABLE}")
        conn.execute(f"DROP TABLE {ledger_tokens.TOTALS_TABLE}")
        conn.execute("ALTER TABLE jobs DROP COLUMN tokens_cache_write")
        conn.execute("ALTER TABLE jobs DROP COLUMN tokens_reasoning")
        conn.execute("UPDATE projection_versions SET version = 4 WHERE projection = ?", (ledger.NAME,))
    async with SQLiteEventStore.open(db) as store:
        await JobQueue.open(store, clock=clock)
        assert await token_rows(store) == expected
        assert (await spending(store, job.id)).wasted == Tokens(input=100, output=10)  # given back by its worker
    check = subprocess.run([sys.executable, "-m", "gormes", "--db", str(db), "projections", "rebuild", "--check"],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


async def test_a_version_4_ledger_on_postgresql_is_migrated_to_its_rebuild():
    from pg_helpers import PG_URL, admin, fresh_schema

    from gormes.events.postgres import PostgresEventStore

    clock = Clock()
    with fresh_schema() as schema:
        async with PostgresEventStore.open(PG_URL, schema=schema, poll_interval=0.05) as store:
            queue = await JobQueue.open(store, clock=clock)
            job = await queue.submit("work")
            claimed = await queue.claim({"work"})
            await queue.add_tokens(job.id, claimed.lock_token, input=100, output=10, cache_write=3, model="m")
            await queue.release(job.id, claimed.lock_token, "shutdown")
            expected = await token_rows(store)
        # what a version-4 ledger held: no token tables, no columns for the new kinds
        for sql in (f"DROP TABLE {ledger_tokens.JOB_TABLE}", f"DROP TABLE {ledger_tokens.TOTALS_TABLE}",
                    "ALTER TABLE jobs DROP COLUMN tokens_cache_write", "ALTER TABLE jobs DROP COLUMN tokens_reasoning",
                    f"UPDATE projection_versions SET version = 4 WHERE projection = '{ledger.NAME}'"):
            admin(f'SET search_path TO "{schema}"; {sql}')
        async with PostgresEventStore.open(PG_URL, schema=schema, poll_interval=0.05) as store:
            await JobQueue.open(store, clock=clock)
            migrated = await token_rows(store)
            assert migrated["jobs"] == [(job.id, 100, 10, 0, 3, 0)]
            assert migrated == expected
            await ledger.rebuild(store)
            assert await token_rows(store) == migrated
