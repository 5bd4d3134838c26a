"""On SQLite the ledger writes a run of claims, or of completions, with one
executemany: the rows must be exactly those that folding each event alone gives."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gormes.actors.jobs.queue import JobQueue
from gormes.events.codec import default_codec
from gormes.events.base import Recorded
from gormes.events.sqlite import SQLiteEventStore
from gormes.projections import ledger


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
    conn = sqlite3.connect(db)
    batched = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    assert len(batched) == 11  # one removed on completion
    # when the ledger is folded again, one event at a time
    conn.execute("BEGIN")
    ledger.reset(conn)
    rows = conn.execute(
        "SELECT position, stream, version, type, type_version, data, recorded_at FROM events"
        " ORDER BY position"
    ).fetchall()
    for pos, stream, version, type_, tv, data, at in rows:
        if stream.startswith("job-"):
            event = default_codec.decode(type_, tv, data)
            ledger.apply_one(conn, Recorded(pos, stream, version, type_, event, at))
    # then every row is the same
    assert conn.execute("SELECT * FROM jobs ORDER BY id").fetchall() == batched
    conn.execute("ROLLBACK")
    conn.close()
