"""`job.list` answering hundreds of megabytes to one call.

A gateway may list its own jobs, up to 500 a page, and each may hold 1 MiB of data
(the cap on a gateway's job data). So one `job__list` made the server read, build
and send 500 MiB (measured on SQLite: 0.6-2.8 s and 1.5 GB more of the server's
memory; on PostgreSQL 0.8-4.2 s and 2 GB), for as many calls as its rate allows,
and a run that called it recorded the answer whole in its log. A page now holds at
most `limit` jobs and, past its first, `LIST_PAGE_BYTES` (4 MiB) of their data,
results, progress and errors, for every caller; `next` says where the rest starts
(decision 0076). `gormes jobs list`, the operator's read of its own ledger, is not
the operation and lists everything asked for.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from cli_helpers import run_gormes
from mcp_helpers import call_ok, call_refused, gormes_mcp
from pg_helpers import backend_store

from gormes.actors.jobs.queue import JobQueue
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, InvalidOperationInput
from gormes.tools.builtin import default_registry
from gormes.tools.jobs import LIST_PAGE_BYTES

OPERATOR = Caller(trust="operator", id="cli")
GATEWAY = Caller(trust="gateway", id="mcp:mallory")
PART = "x" * 900_000  # four fit in a page, five do not; one fits a gateway's data cap
SLACK = 64 * 1024  # a page's fixed fields (ids, names, times, submitters) beyond the data counted


async def _pages(executor: Executor, caller: Caller, **query: object) -> list[object]:
    pages, before = [], None
    while True:
        page = await executor.call("job.list", {**query, **({"before": before} if before else {})}, caller)
        pages.append(page)
        if page.next is None:
            return pages
        before = page.next


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_gateways_list_is_cut_at_the_page_cap_and_continues(backend: str, db_path: Path):
    """Six jobs of 900 KB: a page of 500 holds four (3.6 MB; five would pass 4 MiB),
    then `next` gives the other two; each job is listed once, newest first."""
    async with backend_store(backend, db_path) as store:
        queue = await JobQueue.open(store)
        executor = Executor(default_registry(), store, jobs=queue)
        ids = [(await executor.call("job.submit", {"name": "echo", "data": PART}, GATEWAY)).id for _ in range(6)]
        await executor.call("job.submit", {"name": "report", "data": PART}, OPERATOR)  # not its: not listed
        first = await executor.call("job.list", {"limit": 500}, GATEWAY)
        assert len(first.jobs) == 4 and len(msgspec.json.encode(first)) <= LIST_PAGE_BYTES + SLACK
        pages = await _pages(executor, GATEWAY, limit=500)
        assert [len(p.jobs) for p in pages] == [4, 2]
        assert [j.id for p in pages for j in p.jobs] == ids[::-1]
        assert all(len(msgspec.json.encode(p)) <= LIST_PAGE_BYTES + SLACK for p in pages)
        # `limit` still cuts first; the last page says there is no more.
        small = await _pages(executor, GATEWAY, limit=3)
        assert [len(p.jobs) for p in small] == [3, 3] and small[-1].next is None
        assert [len(p.jobs) for p in await _pages(executor, GATEWAY, limit=6)] == [4, 2]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_the_operators_list_is_paged_too_and_a_job_past_the_cap_gets_a_page_of_its_own(
        backend: str, db_path: Path):
    async with backend_store(backend, db_path) as store:
        queue = await JobQueue.open(store)
        executor = Executor(default_registry(), store, jobs=queue)
        big = await executor.call("job.submit", {"name": "report", "data": "y" * (LIST_PAGE_BYTES + 1)}, OPERATOR)
        small = await executor.call("job.submit", {"name": "report", "data": 1}, OPERATOR)
        first = await executor.call("job.list", {"limit": 500}, OPERATOR)
        assert [j.id for j in first.jobs] == [small.id]
        pages = await _pages(executor, OPERATOR, limit=500)
        assert [[j.id for j in p.jobs] for p in pages] == [[small.id], [big.id]]
        for bad in ("not-a-cursor", "12:", "\u00b2:x", f"{2**63}:x"):
            with pytest.raises(InvalidOperationInput, match="before must be the `next` of a job.list page"):
                await executor.call("job.list", {"before": bad}, OPERATOR)


async def test_over_mcp_a_gateways_page_is_bounded_and_next_reads_the_rest(db_path: Path):
    async with gormes_mcp(db_path) as client:
        ids = [(await call_ok(client, "job__submit", name="echo", data=PART))["id"] for _ in range(5)]
        first = await call_ok(client, "job__list", limit=500)
        assert len(first["jobs"]) == 4 and len(json.dumps(first)) <= LIST_PAGE_BYTES + SLACK
        rest = await call_ok(client, "job__list", limit=500, before=first["next"])
        refused = await call_refused(client, "job__list", before="12:")
    assert [j["id"] for j in first["jobs"] + rest["jobs"]] == ids[::-1] and rest.get("next") is None
    assert refused.startswith("InvalidOperationInput: ")
    # The operator's own read of its ledger is not the operation: it lists what it asks for.
    listed = run_gormes(db_path, "jobs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [j["id"] for j in json.loads(listed.stdout)] == ids[::-1]
