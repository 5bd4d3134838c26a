"""On SQLite the ledger writes a run of claims, or of completions, or of token
counts, with executemany: the rows must be exactly those that folding each event
alone gives."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gormes.actors.jobs.queue import JobQueue
from gormes.events.codec import default_codec
from gormes.events.base import Recorded
from gormes.events.jobs import JobTokensAdded, Tokens, job_stream
from gormes.events.sqlite import SQLiteEventStore
from gormes.events.store import AppendRequest
from gormes.projections import ledger
from gormes.projections.ledger_tokens import JOB_TABLE, TOTALS_TABLE

TABLES = ("jobs", JOB_TABLE, TOTALS_TABLE)


async def test_rounds_of_claims_and_completions_give_the_rows_of_one_event_at_a_time(tmp_path: Path):
    db = tmp_path / "gormes.db"
    # given rounds of claims and completions (with a job removed on completion,
    # a stale token and a failure among them), written as a worker writes them
    async with SQLiteEventStore.open(db) as store:
        queue = await JobQueue.open(store)
        for i in range(12):
            await queue.submit("a", {"i": i}, {"remove_on_complete": i == 3})
        jobs = await queue.claim_many({"a"}, worker_id="w", limit=8)
        items = [(j.id, j.lock_token, {"r": j.data["i"]}) for j in jobs[:6]]
        items.append((jobs[6].id, "stale", None))
        outcomes, more = await queue.complete_and_claim(items, {"a"}, worker_id="w", limit=4, rows=False)
        assert sum(o is None for o in outcomes) == 6
        await queue.fail(jobs[7].id, jobs[7].lock_token, "boom")
        await queue.complete_many([(j.id, j.lock_token, None) for j in more])
    batched = rows_of(db)
    assert len(batched["jobs"]) == 11  # one removed on completion
    # when the ledger is folded again, one event at a time, every row is the same
    assert folded_one_at_a_time(db) == batched


async def test_a_run_of_token_counts_gives_the_rows_of_one_event_at_a_time(tmp_path: Path):
    db = tmp_path / "gormes.db"
    # given token counts of several jobs in one transaction (as a batch of agent
    # jobs' inbox reads writes them): models, none, a child's roll-up, a job twice
    async with SQLiteEventStore.open(db) as store:
        queue = await JobQueue.open(store)
        for i in range(4):
            await queue.submit("a", {"i": i})
        jobs = await queue.claim_many({"a"}, worker_id="w", limit=3)  # the fourth waits
        waiting = [j for j in await queue.list() if j.id not in {c.id for c in jobs}][0]
        counts = [
            (jobs[0].id, Tokens(input=3, output=1), "m1", None), (jobs[1].id, Tokens(input=5), None, None),
            (jobs[2].id, Tokens(output=7, cache_read=2), "m2", None), (jobs[0].id, Tokens(input=1), "m2", None),
            (jobs[1].id, Tokens(input=9, output=9), None, "child-1"), (waiting.id, Tokens(input=4), "m1", None),
        ]
        requests = []
        for job_id, tokens, model, child in counts:
            requests.append(AppendRequest(job_stream(job_id), [JobTokensAdded(
                tokens=tokens, model=model, from_child=child, at=1_000 + len(requests))]))
        await store.append_many(requests)
    batched = rows_of(db)
    assert batched[TOTALS_TABLE] and batched[JOB_TABLE]
    assert folded_one_at_a_time(db) == batched


def rows_of(db: Path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(db)
    try:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in TABLES}
    finally:
        conn.close()


def folded_one_at_a_time(db: Path) -> dict[str, list[tuple]]:
    """The ledger's rows folded again from the log, each event on its own (`apply_one`)."""
    conn = sqlite3.connect(db)
    conn.execute("BEGIN")
    try:
        ledger.reset(conn)
        rows = conn.execute(
            "SELECT position, stream, version, type, type_version, data, recorded_at FROM events"
            " ORDER BY position"
        ).fetchall()
        for pos, stream, version, type_, tv, data, at in rows:
            if stream.startswith("job-"):
                event = default_codec.decode(type_, tv, data)
                ledger.apply_one(conn, Recorded(pos, stream, version, type_, event, at))
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in TABLES}
    finally:
        conn.execute("ROLLBACK")
        conn.close()
