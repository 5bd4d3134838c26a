"""A gateway's job naming the operator's concurrency key (decision 0032).

Idempotency and debounce keys are the submitter's own; a concurrency key is
global, and each job carries its own limit, which the claim compares with the
number of the key's jobs held. So a gateway that submits a job with the
operator's key and a limit of its own choosing (1000) is claimed while the
operator's job, whose limit is 1, holds the key: two `prod` deploys run at once,
which is what the operator's limit was there to prevent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_helpers import call_ok, gormes_mcp

from gormes.actors.jobs.queue import JobQueue, Submitter
from gormes.events.sqlite import SQLiteEventStore

OPERATOR = Submitter(trust="operator", caller="cli")


@pytest.mark.xfail(strict=True, reason=(
    "design: a concurrency key is shared by every submitter and each job brings its own limit, so an"
    " untrusted caller's limit overrides the operator's; the fix is a choice for decision 0032 (namespace an"
    " untrusted submitter's key, or hold a key to the strictest limit among its held jobs and the candidate)"
))
async def test_a_gateway_cannot_run_past_the_operators_limit_on_a_key(db_path: Path):
    async with SQLiteEventStore.open(db_path) as store:
        queue = await JobQueue.open(store)
        await queue.submit("deploy", {"who": "operator"}, {"concurrency_key": "prod", "concurrency_limit": 1},
                           submitter=OPERATOR)
    async with gormes_mcp(db_path) as client:
        await call_ok(client, "job__submit", name="deploy", data={"who": "gateway"},
                      options={"concurrency_key": "prod", "concurrency_limit": 1000})
    async with SQLiteEventStore.open(db_path) as store:
        queue = await JobQueue.open(store)
        first = await queue.claim({"deploy"}, worker_id="w1")
        second = await queue.claim({"deploy"}, worker_id="w2")
    assert first is not None and first.data == {"who": "operator"}
    # the operator said one `prod` job at a time: the gateway's must wait for it
    assert second is None, f"a second 'prod' job was claimed while the first held the key: {second.data}"


@pytest.mark.xfail(strict=True, reason=(
    "design: as above; holding a key to the strictest limit would still let a gateway's job starve the"
    " operator's, so this one asks for an untrusted submitter's key to be its own (decision 0032)"
))
async def test_a_gateway_cannot_hold_the_operators_key_and_starve_its_jobs(db_path: Path):
    """The built-in `sleep` handler is any worker's: a gateway's job that sleeps
    (no timeout) while holding the operator's key keeps the operator's jobs of that
    key waiting for as long as it likes."""
    async with gormes_mcp(db_path) as client:
        await call_ok(client, "job__submit", name="sleep", data={"ms": 10**12},
                      options={"concurrency_key": "prod", "concurrency_limit": 1})
    async with SQLiteEventStore.open(db_path) as store:
        queue = await JobQueue.open(store)
        squatter = await queue.claim({"sleep", "deploy"}, worker_id="w1")
        assert squatter is not None and squatter.name == "sleep"  # a worker is sleeping in it
        await queue.submit("deploy", {"who": "operator"}, {"concurrency_key": "prod", "concurrency_limit": 1},
                           submitter=OPERATOR)
        claimed = await queue.claim({"sleep", "deploy"}, worker_id="w2")
    assert claimed is not None and claimed.data == {"who": "operator"}, "the operator's 'prod' job waits on the gateway's"
