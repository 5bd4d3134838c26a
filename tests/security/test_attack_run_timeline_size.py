"""`run.timeline` answering a run's whole timeline to one call.

A gateway may read its own runs' timelines, and fill one: it sends its run 1 MiB
messages (the unread cap per run) as fast as the run reads them, and each read is
an entry of the timeline holding them. One `run__timeline` then made the server
send a 124 MB JSON-RPC line (peak RSS 1.19 GB; the SDK client took 360 s to read
it). A reply is a page now, as `job.inbox`'s is (decision 0076): at most `limit`
entries and, past the first, `LIST_PAGE_BYTES` (4 MiB) of them, oldest first, for
every caller; `next`, passed back as `after`, reads on (decision 0088). `gormes runs
show`, the operator's read of its own log, is not the operation and shows the
whole timeline.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
import trio
from cli_helpers import run_gormes
from mcp_helpers import CLIENT_NAME, call_ok, call_refused, gormes_mcp
from pg_helpers import backend_store

from gormes.events.runs import InboxItem, RunInboxRead, RunStarted, run_stream
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller
from gormes.tools.builtin import default_registry
from gormes.tools.jobs import LIST_PAGE_BYTES
from gormes.tools.memory import own_scope

GATEWAY_ID = f"mcp:{CLIENT_NAME}"
PART = "x" * 900_000  # four reads fit a page, five do not
READS = 12
SLACK = 64 * 1024  # a page's summary and fixed fields beyond the entries counted


async def _gateways_run_read_big_messages(store, run_id: str) -> None:
    """What a gateway's run that read a 900 KB message at each of its turns records."""
    started = RunStarted(run_id=run_id, handler="agent", handler_version="0" * 64, trust="gateway",
                         scope=own_scope(GATEWAY_ID), input={"prompt": "go"})
    reads = [RunInboxRead(seq=n, messages=(InboxItem(id=f"m{n}", sender=GATEWAY_ID, payload=[n, PART], sent_at=n),))
             for n in range(READS)]
    await store.append(run_stream(run_id), [started, *reads])


async def test_a_runs_timeline_is_read_a_bounded_page_at_a_time(db_path: Path, store):
    await _gateways_run_read_big_messages(store, "r-big")
    async with gormes_mcp(db_path) as client:
        with trio.fail_after(60):
            first = await call_ok(client, "run__timeline", run_id="r-big")
            # The call as every client made it before pages: a page, not the whole timeline.
            assert len(json.dumps(first)) <= LIST_PAGE_BYTES + SLACK, len(json.dumps(first))
            pages = [first]
            while pages[-1].get("next") is not None:
                pages.append(await call_ok(client, "run__timeline", run_id="r-big", after=pages[-1]["next"]))
            short = await call_ok(client, "run__timeline", run_id="r-big", limit=5)
            refused = await call_refused(client, "run__timeline", run_id="r-big", after=-1)
            too_far = await call_refused(client, "run__timeline", run_id="r-big", after=2**63)
    assert [len(p["timeline"]) for p in pages] == [4, 4, 4]
    read = [m["id"] for p in pages for e in p["timeline"] for m in e["messages"]]
    assert read == [f"m{n}" for n in range(READS)]  # each entry once, oldest first
    assert all(p["run_id"] == "r-big" and p["status"] == "running" for p in pages)
    assert len(short["timeline"]) == 4 and short["next"] == first["next"]  # the bytes cut before `limit`
    assert refused.startswith("InvalidOperationInput: ") and too_far.startswith("InvalidOperationInput: ")
    # The operator's own read of its log is not the operation: it shows the whole run.
    shown = run_gormes(db_path, "runs", "show", "r-big", "--json")
    assert shown.returncode == 0, shown.stderr
    assert len(json.loads(shown.stdout)["timeline"]) == READS and "next" not in json.loads(shown.stdout)


async def test_limit_cuts_a_page_of_small_entries(db_path: Path, store):
    started = RunStarted(run_id="r-small", handler="agent", handler_version="0" * 64, trust="gateway",
                         scope=own_scope(GATEWAY_ID))
    reads = [RunInboxRead(seq=n, messages=(InboxItem(id=f"m{n}", sender=GATEWAY_ID, payload=n, sent_at=n),))
             for n in range(7)]
    await store.append(run_stream("r-small"), [started, *reads])
    async with gormes_mcp(db_path) as client:
        first = await call_ok(client, "run__timeline", run_id="r-small", limit=3)
        second = await call_ok(client, "run__timeline", run_id="r-small", limit=3, after=first["next"])
        third = await call_ok(client, "run__timeline", run_id="r-small", limit=3, after=second["next"])
        whole = await call_ok(client, "run__timeline", run_id="r-small")
    assert [len(p["timeline"]) for p in (first, second, third)] == [3, 3, 1] and third.get("next") is None
    assert [e["position"] for p in (first, second, third) for e in p["timeline"]] == [
        e["position"] for e in whole["timeline"]]
    assert whole.get("next") is None and len(whole["timeline"]) == 7


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_pages_on_either_backend_and_for_the_operator(backend: str, db_path: Path):
    """The page's rows are read by a statement of its own: on PostgreSQL too; and the
    operator's calls of the operation are paged the same (only `runs show` is whole)."""
    async with backend_store(backend, db_path) as store:
        await _gateways_run_read_big_messages(store, "r-big")
        executor = Executor(default_registry(), store)
        for caller in (Caller(trust="gateway", id=GATEWAY_ID), Caller(trust="operator", id="cli")):
            pages = [await executor.call("run.timeline", {"run_id": "r-big"}, caller)]
            while pages[-1].next is not None:
                pages.append(await executor.call("run.timeline", {"run_id": "r-big", "after": pages[-1].next}, caller))
            assert [len(p.timeline) for p in pages] == [4, 4, 4]
            assert all(len(msgspec.json.encode(p)) <= LIST_PAGE_BYTES + SLACK for p in pages)
            got = await executor.call("run.get", {"run_id": "r-big"}, caller)
            assert (got.status, got.iterations, got.input) == ("running", 0, {"prompt": "go"})
