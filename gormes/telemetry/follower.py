"""The trace follower: exports each run and each job attempt as it ends.

It follows the log, never the hot path: it reads the events that end a run
(`run.completed|failed|cancelled`) or a job attempt (`job.completed`, `job.failed`,
`job.stalled`, ...), builds the spans of what ended from the log
(gormes/telemetry/read.py), sends them, and only then moves its position, kept in
the `tracking` table under `telemetry.traces`. A crash between sending and
moving sends the same spans again after a restart (the same ids: derived from the
log), so no span the log has is lost; a collector that is down is retried with a
growing pause, the position held until it answers.

On its first start (no tracking row yet) it starts at the head of the log: runs
that ended before then are exported with `gormes trace RUN`, not in one flood.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

import trio

from gormes.errors import GormesError
from gormes.events.base import Recorded
from gormes.events.store import EventLog, EventStore, Transaction
from gormes.projections import bookkeeping
from gormes.telemetry.read import attempt_spans, run_trace
from gormes.telemetry.spans import Span

TRACKING = "telemetry.traces"
RUN_ENDS = ("run.completed", "run.failed", "run.cancelled")
ATTEMPT_ENDS = ("job.completed", "job.failed", "job.awaiting_children", "job.stalled",
                "job.timed_out", "job.released", "job.cancelled")
BATCH = 200
MAX_PAUSE_S = 60.0

log = logging.getLogger("gormes.telemetry")

class Sender(Protocol):
    """Where spans go (`otlp.SpanSender`): `send` blocks, True when the collector took
    them; after a False, `failure` says why in one line."""

    failure: str | None

    def send(self, spans: Sequence[Span]) -> bool: ...


class TraceFollower:
    def __init__(self, store: EventStore, sender: Sender, *, batch: int = BATCH,
                 from_start: bool = False, pause_s: float = 1.0) -> None:
        self.store = store
        self.sender = sender
        self.batch = batch
        self.from_start = from_start
        self.pause_s = pause_s
        self.position = 0
        self.exported = 0  # spans the collector took, since this follower started
        self.failures = 0  # sends that failed (retried)

    async def prepare(self) -> int:
        """Read the tracking row, creating it (at the head, or 0) the first time."""
        from_start = self.from_start

        def start(tx: Transaction) -> int:
            conn = tx.conn
            row = conn.execute("SELECT position FROM tracking WHERE projection = ?", (TRACKING,)).fetchone()
            if row is not None:
                return int(row[0])
            position = 0 if from_start else int(conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0])
            bookkeeping.set_position(conn, TRACKING, position)
            return position

        self.position = await self.store.transact(start)
        return self.position

    async def step(self) -> bool:
        """Export what one page of the log ended; True when caught up."""
        after = self.position
        records, scanned, head = await self.store.read_page(after, self.batch, RUN_ENDS + ATTEMPT_ENDS)
        if scanned <= after:
            return True
        spans = await self.store.read_with(lambda log_: spans_ended(log_, records))
        ok = await trio.to_thread.run_sync(self.sender.send, spans)
        if not ok:
            self.failures += 1
            raise ExportFailed(f"the collector did not take {len(spans)} span(s) of events {after + 1}..{scanned}: "
                               f"{self.sender.failure}")
        self.exported += len(spans)
        self.position = await self.store.transact(lambda tx: _advance(tx, after, scanned))
        return self.position >= head

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        await self.prepare()
        task_status.started()
        pause = self.pause_s
        while True:
            generation = self.store.generation
            try:
                caught_up = await self.step()
            except (GormesError, OSError) as exc:
                log.warning("trace export: %s; retrying in %.0f s", exc, pause)
                await trio.sleep(pause)
                pause = min(MAX_PAUSE_S, pause * 2)
                continue
            pause = self.pause_s
            if caught_up:
                await self.store.wait_for_change(generation)


class ExportFailed(GormesError):
    """The collector refused or did not answer (the SDK retried already)."""


def _advance(tx: Transaction, after: int, scanned: int) -> int:
    current = bookkeeping.tracked_position(tx.conn, TRACKING)
    if current != after:
        return current  # another follower (another daemon) moved it first
    bookkeeping.set_position(tx.conn, TRACKING, scanned)
    return scanned


def spans_ended(log_: EventLog, records: Sequence[Recorded]) -> list[Span]:
    """The spans of the runs and job attempts these events ended."""
    spans: list[Span] = []
    attempts: dict[str, list[int]] = {}
    for record in records:
        if record.type in RUN_ENDS and record.stream.startswith("run-"):
            try:
                spans += run_trace(log_, record.stream[4:])
            except GormesError as exc:
                log.warning("trace export: run %s skipped: %s", record.stream[4:], exc)
        elif record.type in ATTEMPT_ENDS and record.stream.startswith("job-"):
            attempts.setdefault(record.stream[4:], []).append(record.version)
    for job_id, versions in attempts.items():
        spans += attempt_spans(log_, job_id, versions)
    return spans
