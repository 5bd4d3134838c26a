"""The trace follower exports each run as it ends, from its tracking position: a
send the collector refused is sent again (by a restarted follower too), and what
was sent is not sent again after a restart. Plus the job attempt spans, pure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gormes.events.base import Recorded
from gormes.events.jobs import JobClaimed, JobCompleted, JobFailed, JobOptions, JobSubmitted
from gormes.events.jsonl import import_lines_in, parse_lines
from gormes.events.sqlite import SQLiteEventStore
from gormes.telemetry.follower import TRACKING, ExportFailed, TraceFollower
from gormes.telemetry.spans import Span, attempt_span_id, job_attempts, trace_id

FIXTURES = Path(__file__).resolve().parents[2] / "replay_fixtures"


class Collector:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.up = True
        self.failure: str | None = None

    def send(self, spans: Sequence[Span]) -> bool:
        self.failure = None if self.up else "Connection refused"
        if not self.up:
            return False
        self.spans += spans
        return True


async def load(store: SQLiteEventStore, name: str) -> None:
    lines = parse_lines((FIXTURES / name).read_text().splitlines())
    await store.transact(lambda tx: import_lines_in(tx, lines))


async def caught_up(follower: TraceFollower) -> None:
    while not await follower.step():
        pass


async def test_runs_ending_after_the_first_start_are_exported_once(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    collector = Collector()
    async with SQLiteEventStore.open(db) as store:
        await load(store, "subagents.jsonl")  # ended before the follower ever started
        first = TraceFollower(store, collector)
        start = await first.prepare()
        assert start == await store.head()
        await load(store, "tool_error.jsonl")
        await caught_up(first)
        names = {s.attributes.get("gormes.run.id") for s in collector.spans if s.name.startswith("invoke_agent")}
        assert names == {"tool-error-1"}
        sent = len(collector.spans)

        collector.up = False
        await load(store, "provider_retry.jsonl")
        with pytest.raises(ExportFailed, match="did not take .*: Connection refused$"):
            await first.step()
        assert len(collector.spans) == sent

    collector.up = True
    async with SQLiteEventStore.open(db) as store:  # a restart: the position was kept
        again = TraceFollower(store, collector)
        await again.prepare()
        await caught_up(again)
        tracked = await store.read_sql(
            lambda conn: conn.execute("SELECT position FROM tracking WHERE projection = ?", (TRACKING,)).fetchone()[0])
        assert tracked == await store.head()
    runs = [s.attributes.get("gormes.run.id") for s in collector.spans if s.name.startswith("invoke_agent")]
    assert runs == ["tool-error-1", "provider-retry-1"]


def _rec(version: int, event: object, position: int | None = None) -> Recorded:
    return Recorded(position or version, "job-J1", version, event.type, event, float(version))  # type: ignore[attr-defined]


def test_job_attempts_are_spans_from_claim_to_end() -> None:
    records = [
        _rec(1, JobSubmitted(job_id="J1", name="agent", data=None, options=JobOptions(queue="q"), created_at=1000)),
        _rec(2, JobClaimed(worker_id="w", lock_token="t1", lease_ms=10, lock_until=1, at=2000)),
        _rec(3, JobFailed(error="boom", status="delayed", at=2500)),
        _rec(4, JobClaimed(worker_id="w", lock_token="t2", lease_ms=10, lock_until=1, at=4000)),
        _rec(5, JobCompleted(at=7000)),
    ]
    first, second = job_attempts(records)
    assert first.span.trace_id == second.span.trace_id == trace_id("job:J1")
    assert first.span.span_id == attempt_span_id("J1", 2) != second.span.span_id
    assert (first.span.start_ns, first.span.end_ns) == (2_000_000_000, 2_500_000_000)
    assert first.span.status == "error" and first.span.status_message == "boom"
    assert first.span.attributes["gormes.job.outcome"] == "retry"
    assert second.span.status == "ok" and second.span.attributes["gormes.job.attempt"] == 2
    assert second.end_version == 5
    held = job_attempts(records[:4])
    assert held[-1].end_version is None and held[-1].span.attributes["gormes.job.outcome"] == "active"
