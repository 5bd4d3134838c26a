"""A gateway's job naming the operator's concurrency key (decision 0032).

Idempotency and debounce keys are the submitter's own, and so, for a gateway or a
child agent, is a concurrency key: the key recorded is the one it gave under a
prefix naming its trust class and scope. Before, a key was global and each job
brought its own limit: a gateway's job that slept holding the operator's `prod`
kept the operator's `prod` jobs waiting as long as it liked, and a gateway's job
with a limit of 1000 was claimed while the operator's limit-1 job held the key.
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import run_gormes
from mcp_helpers import call_ok, call_refused, gormes_mcp

from gormes.actors.jobs.queue import JobQueue, Submitter
from gormes.events.jobs import MAX_KEY_LENGTH
from gormes.events.sqlite import SQLiteEventStore

OPERATOR = Submitter(trust="operator", caller="cli")
PROD = {"concurrency_key": "prod", "concurrency_limit": 1}


async def claim_all(db_path: Path, names: set[str]) -> list:
    """Every job workers would claim now, one claim after another."""
    async with SQLiteEventStore.open(db_path) as store:
        queue = await JobQueue.open(store)
        claimed = []
        while (job := await queue.claim(names, worker_id=f"w{len(claimed)}")) is not None:
            claimed.append(job)
        return claimed


async def test_a_gateway_cannot_hold_the_operators_key_and_starve_its_jobs(db_path: Path):
    """The built-in `sleep` handler is any worker's: a gateway's job that sleeps
    (no timeout) while holding the operator's key kept the operator's jobs of that
    key waiting for as long as it liked."""
    async with gormes_mcp(db_path) as client:
        await call_ok(client, "job__submit", name="sleep", data={"ms": 10**12}, options=PROD)
    async with SQLiteEventStore.open(db_path) as store:
        queue = await JobQueue.open(store)
        squatter = await queue.claim({"sleep", "deploy"}, worker_id="w1")
        assert squatter is not None and squatter.name == "sleep"  # a worker is sleeping in it
        await queue.submit("deploy", {"who": "operator"}, PROD, submitter=OPERATOR)
        claimed = await queue.claim({"sleep", "deploy"}, worker_id="w2")
    assert claimed is not None and claimed.data == {"who": "operator"}, "the operator's 'prod' job waits on the gateway's"


async def test_the_operators_limit_holds_whatever_limit_a_gateway_names(db_path: Path):
    async with SQLiteEventStore.open(db_path) as store:
        queue = await JobQueue.open(store)
        for _ in range(2):
            await queue.submit("deploy", {"who": "operator"}, PROD, submitter=OPERATOR)
    async with gormes_mcp(db_path) as client:
        job = await call_ok(client, "job__submit", name="deploy", data={"who": "gateway"},
                            options={"concurrency_key": "prod", "concurrency_limit": 1000})
    claimed = await claim_all(db_path, {"deploy"})
    # one operator `prod` job at a time, as the operator said; the gateway's holds a key of its own
    assert sorted(j.data["who"] for j in claimed) == ["gateway", "operator"]
    async with SQLiteEventStore.open(db_path) as store:
        gateways = await (await JobQueue.open(store)).get(job["id"])
    assert gateways.options.concurrency_key.startswith("gateway:") and gateways.options.concurrency_key.endswith("/prod")


async def test_a_gateways_key_is_its_own_limit_and_not_another_gateways(db_path: Path):
    for name in ("alice", "alice", "bob"):
        async with gormes_mcp(db_path, client_name=name) as client:
            await call_ok(client, "job__submit", name="deploy", data={"who": name}, options=PROD)
    claimed = await claim_all(db_path, {"deploy"})
    assert sorted(j.data["who"] for j in claimed) == ["alice", "bob"]  # alice's second waits for her first


async def test_a_gateways_key_keeps_to_the_length_with_its_prefix(db_path: Path):
    async with gormes_mcp(db_path) as client:
        error = await call_refused(client, "job__submit", name="deploy",
                                   options={"concurrency_key": "k" * MAX_KEY_LENGTH})
        assert "concurrency_key must be at most" in error and "'gateway' caller" in error
        assert "must not be empty" in await call_refused(client, "job__submit", name="deploy",
                                                         options={"concurrency_key": "  "})


def test_the_operators_key_is_kept_as_given(db_path: Path):
    """Through the executor, as the operator: shared, as decision 0032 says."""
    job_id = run_gormes(db_path, "jobs", "submit", "deploy", "--concurrency-key", "prod").stdout.strip()
    shown = json.loads(run_gormes(db_path, "jobs", "get", job_id, "--json").stdout)
    assert shown["concurrency_key"] == "prod"
