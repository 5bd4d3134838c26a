"""`job.inbox` answering a job's whole inbox to one call.

A job's inbox keeps every message sent to it, read ones included, and a message
may hold what its sender gives it (a gateway's up to 1 MiB; the operator's, and a
parent run's, more). `job.inbox` answered all of them at once, for as many calls as
a gateway's rate allows, and a run that called it recorded the answer whole in its
log. A page now holds at most `limit` messages and, past its first, `LIST_PAGE_BYTES`
(4 MiB) of their payloads, for every caller, oldest first; `next`, passed back as
`after`, reads on (decision 0076's addendum). `gormes jobs inbox`, the operator's
read of its own ledger, is not the operation and shows the whole inbox.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from cli_helpers import run_gormes
from mcp_helpers import CLIENT_NAME, call_ok, call_refused, gormes_mcp
from pg_helpers import backend_store

from gormes.actors.jobs.queue import JobQueue
from gormes.events.jobs import Submitter
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, InvalidOperationInput
from gormes.tools.builtin import default_registry
from gormes.tools.jobs import LIST_PAGE_BYTES
from gormes.tools.memory import own_scope

OPERATOR = Caller(trust="operator", id="cli")
GATEWAY = Caller(trust="gateway", id="mcp:mallory")
PART = "x" * 900_000  # four fit in a page, five do not
SLACK = 64 * 1024  # a page's fixed fields (ids, senders, times) beyond the payloads counted


async def _pages(executor: Executor, caller: Caller, job_id: str, **query: object) -> list[object]:
    pages, after = [], None
    while True:
        page = await executor.call("job.inbox", {"id": job_id, **query, **({"after": after} if after else {})}, caller)
        pages.append(page)
        if page.next is None:
            return pages
        after = page.next


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_jobs_inbox_is_read_a_bounded_page_at_a_time_oldest_first(backend: str, db_path: Path):
    """Six messages of 900 KB to a gateway's job: a page of 500 holds four (3.6 MB;
    five would pass 4 MiB), then `next` gives the other two; each message is read
    once, in the order sent; the operator's reads are paged the same."""
    async with backend_store(backend, db_path) as store:
        queue = await JobQueue.open(store)
        executor = Executor(default_registry(), store, jobs=queue)
        job = await executor.call("job.submit", {"name": "echo", "data": None}, GATEWAY)
        sent = [(await executor.call("job.send", {"id": job.id, "payload": [n, PART]}, OPERATOR)).id
                for n in range(6)]
        for caller in (GATEWAY, OPERATOR):
            # The call as every client made it before pages: a page, not the inbox.
            first = await executor.call("job.inbox", {"id": job.id}, caller)
            assert len(first.messages) == 4 and len(msgspec.json.encode(first)) <= LIST_PAGE_BYTES + SLACK
            pages = await _pages(executor, caller, job.id, limit=500)
            assert [len(p.messages) for p in pages] == [4, 2]
            assert [m.id for p in pages for m in p.messages] == sent
            assert all(len(msgspec.json.encode(p)) <= LIST_PAGE_BYTES + SLACK for p in pages)
            # `limit` cuts first; the default page holds every one that fits.
            assert [len(p.messages) for p in await _pages(executor, caller, job.id, limit=3)] == [3, 3]
            assert [len(p.messages) for p in await _pages(executor, caller, job.id)] == [4, 2]
        # A reader that waits for more passes its last message's `sent_at:id`: a
        # message sent since is read, and the ones it has are not again.
        last = pages[-1].messages[-1]
        later = await executor.call("job.send", {"id": job.id, "payload": "one more"}, OPERATOR)
        newer = await executor.call("job.inbox", {"id": job.id, "after": f"{last.sent_at}:{last.id}"}, GATEWAY)
        assert [m.id for m in newer.messages] == [later.id] and newer.next is None
        # A message past the cap alone is a page of its own.
        big = await executor.call("job.send", {"id": job.id, "payload": "y" * (LIST_PAGE_BYTES + 1)}, OPERATOR)
        tail = await executor.call("job.inbox", {"id": job.id, "after": f"{later.sent_at}:{later.id}"}, OPERATOR)
        assert [m.id for m in tail.messages] == [big.id]
        for bad in ("not-a-cursor", "12:", "\u00b2:x", f"{2**63}:x"):
            with pytest.raises(InvalidOperationInput, match="after must be the `next` of a job.inbox page"):
                await executor.call("job.inbox", {"id": job.id, "after": bad}, GATEWAY)


async def test_over_mcp_an_inbox_page_is_bounded_and_next_reads_the_rest(db_path: Path, store):
    queue = await JobQueue.open(store)
    own = Submitter(trust="gateway", caller=f"mcp:{CLIENT_NAME}", scope=own_scope(f"mcp:{CLIENT_NAME}"))
    job = await queue.submit("echo", None, submitter=own)
    sent = [(await queue.send(job.id, [n, PART], sender="operator")).id for n in range(5)]
    async with gormes_mcp(db_path) as client:
        first = await call_ok(client, "job__inbox", id=job.id)
        rest = await call_ok(client, "job__inbox", id=job.id, limit=500, after=first["next"])
        refused = await call_refused(client, "job__inbox", id=job.id, after="12:")
    assert len(first["messages"]) == 4 and len(json.dumps(first)) <= LIST_PAGE_BYTES + SLACK
    assert [m["id"] for m in first["messages"] + rest["messages"]] == sent and rest.get("next") is None
    assert refused.startswith("InvalidOperationInput: ")
    # The operator's own read of its ledger is not the operation: it shows the whole inbox.
    shown = run_gormes(db_path, "jobs", "inbox", job.id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert [m["id"] for m in json.loads(shown.stdout)] == sent
