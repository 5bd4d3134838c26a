"""A job records who submitted it (`Submitter` on job.submitted), on both backends:
the state, the ledger, a rebuild, a replay and a spawned child keep it; events and
ledgers from before it existed still read (no submitter), and a version-1 ledger
is migrated in place."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import msgspec
from pg_helpers import admin

from gormes.actors.jobs.context import JobContext
from gormes.actors.actor import fold
from gormes.actors.jobs.actor import JOB
from gormes.actors.jobs.queue import JobQueue, Submitter
from gormes.events.codec import default_codec
from gormes.events.jobs import JobOptions, JobSubmitted, job_stream
from gormes.events.sqlite import SQLiteEventStore
from gormes.projections import bookkeeping, ledger

GATEWAY = Submitter(trust="gateway", caller="mcp:alice", scope="chat:mcp-alice")


async def test_the_submitter_is_recorded_and_read_back_everywhere(store):
    queue = await JobQueue.open(store)
    job = await queue.submit("echo", {"x": 1}, submitter=GATEWAY)
    assert job.submitter == GATEWAY
    assert (await queue.get(job.id)).submitter == GATEWAY
    assert [j.submitter for j in await queue.list()] == [GATEWAY]
    [record] = await store.read_stream(job_stream(job.id))
    assert record.event.submitter == GATEWAY
    assert fold(JOB, [record.event]).value.submitter == GATEWAY
    claimed = await queue.claim({"echo"}, worker_id="w1")
    assert claimed.submitter == GATEWAY
    assert JobContext(queue, claimed).submitter == GATEWAY
    await ledger.rebuild(store)
    assert (await queue.get(job.id)).submitter == GATEWAY


async def test_a_job_submitted_without_one_has_none(store):
    queue = await JobQueue.open(store)
    job = await queue.submit("echo", None)
    assert job.submitter is None and (await queue.get(job.id)).submitter is None


async def test_a_spawned_child_and_a_replay_keep_the_submitter(store):
    queue = await JobQueue.open(store)
    await queue.submit("parent", None, submitter=GATEWAY)
    ctx = JobContext(queue, await queue.claim({"parent"}, worker_id="w1"))
    child = await ctx.spawn("echo", {"y": 2})
    assert child.submitter == GATEWAY
    claimed = await queue.claim({"echo"}, worker_id="w1")
    await queue.complete(claimed.id, claimed.lock_token, None)
    again = await queue.replay(claimed.id)
    assert again.submitter == GATEWAY  # an operator's replay does not make it the operator's


def test_an_event_recorded_before_submitters_decodes_with_none():
    event = JobSubmitted(job_id="j1", name="echo", data=None, options=JobOptions(), created_at=1)
    raw = msgspec.json.decode(default_codec.encode(event)[2])
    raw.pop("submitter")
    decoded = default_codec.decode("job.submitted", 1, msgspec.json.encode(raw))
    assert decoded.submitter is None and decoded.job_id == "j1"


async def test_a_version_1_sqlite_ledger_is_migrated_in_place(tmp_path):
    path = tmp_path / "old.db"
    async with SQLiteEventStore.open(path) as store:
        queue = await JobQueue.open(store)
        old = await queue.submit("echo", {"x": 1})
    # What a version-1 gormes left: no submitter column (nor version 4's key columns,
    # decision 0032, nor version 5's token columns and tables, decision 0035, nor the
    # indexes of the capped classes' live jobs and of their jobs by owner, decision
    # 0070's addendum and 0076's), version 1 recorded.
    conn = sqlite3.connect(path)
    for index in ("jobs_key_held", "jobs_debounce", "jobs_capped_live", "jobs_capped_owned"):
        conn.execute(f"DROP INDEX {index}")
    for table in ("job_model_tokens", "model_tokens"):
        conn.execute(f"DROP TABLE {table}")
    for column in ("submitter", "concurrency_key", "concurrency_limit", "debounce_key", "submissions",
                   "tokens_cache_write", "tokens_reasoning"):
        conn.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
    bookkeeping.set_built_version(conn, ledger.NAME, 1)
    conn.commit()
    conn.close()
    async with SQLiteEventStore.open(path) as store:
        queue = await JobQueue.open(store)
        assert (await queue.get(old.id)).submitter is None
        new = await queue.submit("echo", None, submitter=GATEWAY)
        assert (await queue.get(new.id)).submitter == GATEWAY
    conn = sqlite3.connect(path)
    try:
        assert bookkeeping.built_version(conn, ledger.NAME) == ledger.VERSION
    finally:
        conn.close()
    # The migrated ledger is the one a rebuild from the log gives.
    check = subprocess.run([sys.executable, "-m", "gormes", "--db", str(path), "projections", "rebuild",
                            "--check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


async def test_a_version_1_postgres_ledger_is_migrated_in_place(tmp_path):
    from pg_helpers import backend_store, reopen_store

    async with backend_store("postgres", tmp_path / "unused.db") as store:
        queue = await JobQueue.open(store)
        old = await queue.submit("echo", {"x": 1})
        schema = store.schema
        admin(f'ALTER TABLE "{schema}".jobs DROP COLUMN submitter')
        admin(f"UPDATE \"{schema}\".projection_versions SET version = 1 WHERE projection = 'ledger'")
        async with reopen_store(store) as again:
            queue = await JobQueue.open(again)
            assert (await queue.get(old.id)).submitter is None
            new = await queue.submit("echo", None, submitter=GATEWAY)
            assert (await queue.get(new.id)).submitter == GATEWAY
        [(version,)] = admin(
            f"SELECT version FROM \"{schema}\".projection_versions WHERE projection = 'ledger'"
        )
        assert version == ledger.VERSION
