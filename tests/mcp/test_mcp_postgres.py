"""`gormes --db postgresql://... mcp`: an MCP client over stdio on a fresh
PostgreSQL schema submits a job and lists it, reads runs, and remembers and
recalls in its own chat scope (`chat:mcp-<client name>`). Skipped, with the
reason, only when the server cannot be reached."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_helpers import CLIENT_NAME, audit_events, call_ok, call_refused, gormes_mcp, tool_names
from pg_helpers import fresh_schema, url_for_schema

from gormes.actors.jobs.queue import JobQueue
from gormes.events.open import open_store
from gormes.tools.memory import own_scope


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_schema() as name:
        yield url_for_schema(name)


async def test_jobs_and_runs_over_mcp_on_postgres(url: str, tmp_path: Path):
    async with gormes_mcp(url, cwd=tmp_path) as client:
        assert {"job__submit", "job__list", "run__list", "memory__recall"} <= await tool_names(client)
        job = await call_ok(client, "run__submit", prompt="Summarize the README", max_iterations=3)
        listed = await call_ok(client, "job__list", status="waiting")
        got = await call_ok(client, "job__get", id=job["id"])
        runs = await call_ok(client, "run__list")
        await call_ok(client, "memory__remember", fact="the README is short")
        recall = await call_ok(client, "memory__recall", query="README", mode="lexical")
        elsewhere = await call_refused(client, "memory__recall", query="README", scope="chat:other")
        cancelled = await call_ok(client, "job__cancel", id=job["id"])

    assert (job["name"], job["status"]) == ("agent", "waiting")
    assert [j["id"] for j in listed["jobs"]] == [job["id"]] and got["id"] == job["id"]
    assert runs == {"runs": []}
    assert [h["text"] for h in recall["hits"]] == ["the README is short"]
    assert "may only use its own scope" in elsewhere
    assert cancelled == {"cancelled": [job["id"]]}
    assert list(tmp_path.iterdir()) == []  # no SQLite file was made

    async with open_store(url) as store:
        assert (await (await JobQueue.open(store)).get(job["id"])).status == "cancelled"
        events = await audit_events(store)
        remembered = await store.read_all(types=["memory.*"])
    assert {r.event.provenance.scope for r in remembered} == {own_scope(f"mcp:{CLIENT_NAME}")}
    assert [(e.operation, e.outcome) for e in events] == [
        ("run.submit", "ok"), ("job.list", "ok"), ("job.get", "ok"), ("run.list", "ok"),
        ("memory.remember", "ok"), ("memory.recall", "ok"), ("memory.recall", "denied"),
        ("job.cancel", "ok"),
    ]
    assert {(e.caller, e.trust) for e in events} == {(f"mcp:{CLIENT_NAME}", "gateway")}
