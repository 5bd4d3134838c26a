"""A gateway's debounced `merge` job grown past the cap on a job's data.

A gateway may send at most 1 MiB of JSON as a job's data, and a submission with a
debounce key joins its own job still in its window (`job.coalesced`), up to 1000
submissions. With `debounce_mode: "merge"` each joined submission is appended to
the job's list, so 1000 submissions of 1 MiB made one job of 1 GB: every join
rewrote the whole ledger row and folded the whole stream under the write lock
(measured: 15 ms per MiB the job held, 1.5 s a submission at 100 MiB, so about
two hours of the operator's writes held up in all), and a worker was handed 1 GB.
A gateway's or child agent's submission now joins a merging job only while the
list stays within the cap; past it, it starts a job of its own, like the 1001st
submission, under the class's live-jobs cap. The operator's merges are not capped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from mcp_helpers import audit_events, call_ok, gormes_mcp

from gormes.actors.jobs.queue import JobQueue
from gormes.events.sqlite import SQLiteEventStore
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller
from gormes.tools.builtin import default_registry
from gormes.tools.job_trust import MAX_UNTRUSTED_DATA_BYTES

PART = "x" * 400_000  # two fit in one job's cap, three do not
MERGE = {"debounce_key": "batch", "debounce_ms": 3_600_000, "debounce_mode": "merge"}


def _size(data: Any) -> int:
    return len(msgspec.json.encode(data))


async def test_a_gateways_merged_job_stays_within_the_cap_on_job_data(db_path: Path):
    async with gormes_mcp(db_path) as client:
        answers = [await call_ok(client, "job__submit", name="echo", data=PART, options=MERGE) for _ in range(5)]
    async with SQLiteEventStore.open(db_path) as store:
        queue = await JobQueue.open(store)
        jobs = [await queue.get(job_id) for job_id in dict.fromkeys(a["id"] for a in answers)]
        types = [r.type for r in await store.read_all()]
        audited = [(a.operation, a.outcome) for a in await audit_events(store)]
    assert [len(job.data) for job in jobs] == [2, 2, 1], "a third part would pass the cap: a new job takes it"
    assert all(_size(job.data) <= MAX_UNTRUSTED_DATA_BYTES for job in jobs)
    assert [a["coalesced"] for a in answers] == [False, True, False, True, False]
    assert (types.count("job.submitted"), types.count("job.coalesced")) == (3, 2)
    assert audited == [("job.submit", "ok")] * 5


async def test_the_operators_merge_is_not_capped(store):
    queue = await JobQueue.open(store)
    executor = Executor(default_registry(), store, jobs=queue)
    operator = Caller(trust="operator", id="cli")
    ids = {(await executor.call("job.submit", {"name": "echo", "data": PART, "options": MERGE}, operator)).id
           for _ in range(3)}
    [job_id] = ids
    job = await queue.get(job_id)
    assert len(job.data) == 3 and _size(job.data) > MAX_UNTRUSTED_DATA_BYTES
