"""What `gormes top` shows, as typed data: one `Snapshot` of the whole workforce.

Everything here is pure: the Structs, and the functions that assemble them from
rows already read out of the projection tables (`gormes/dashboard/read.py` does
the reading). Cost is computed at read time, as every command computes it
(`gormes.actors.runs.costs` for a run, `gormes.actors.agent_jobs.costs` for a job),
never stored; a model without a price makes the cost unknown (`None`), never $0.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from gormes.dashboard.control import ApprovalRow, BudgetRow
from gormes.dashboard.gateway import GatewayCalls
from gormes.dashboard.providers import ProviderRow
from gormes.events.jobs import STATUSES, TERMINAL, Tokens
from gormes.events.runs import RunInboxRead
from gormes.projections.ledger import BREAKER_ERROR  # noqa: F401 - the error a breaker kill records

STALE_AFTER_S = 20.0  # a heartbeat older than this (default interval 5 s) is not a live worker
PROGRESS_WIDTH = 40


class QueueCounts(msgspec.Struct, frozen=True, kw_only=True):
    """How many jobs one queue holds in each status (every status present, 0 included)."""

    queue: str
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class JobRow(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    queue: str
    status: str
    priority: int = 0
    attempts_made: int = 0
    max_attempts: int = 0
    progress: str | None = None  # compact JSON, cut to PROGRESS_WIDTH
    tokens: Tokens = Tokens()
    cost: float | None = None  # its runs' model turns; None: none, or a model without a price
    worker_id: str | None = None
    run_id: str | None = None  # the job's top-level run, when it runs an agent
    last_tool: str | None = None
    error: str | None = None
    created_at: int = 0  # ms since the epoch
    updated_at: int = 0


class RunRow(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    handler: str
    status: str
    depth: int = 0
    model: str | None = None
    job_id: str | None = None
    parent_run_id: str | None = None
    started_at: float = 0.0  # seconds since the epoch
    iterations: int = 0
    tokens: Tokens = Tokens()  # the run's total, its awaited children's included
    cost: float | None = None  # this run's own model turns
    last_tool: str | None = None
    progress: str | None = None
    # What became of the process driving it: "alive", "gone" (cut off: killed, no
    # end can come), "elsewhere" (another host or container); None: not recorded.
    process: str | None = None


class GovernorChange(msgspec.Struct, frozen=True, kw_only=True):
    """A limit change or a breaker trip, as the worker's governor reported it."""

    at: float  # seconds since the epoch
    limit: int
    previous: int
    breaker: bool = False
    reason: str = ""


class GovernorState(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker reported about its governor (None where it reported nothing)."""

    limit: int | None = None
    ceiling: int | None = None
    cpu: str | None = None  # whose CPU it reads: "process" or "machine"
    cpu_percent: float | None = None
    memory_percent: float | None = None
    reason: str | None = None  # of its last decision
    recent: tuple[GovernorChange, ...] = ()  # oldest first


class Receipt(msgspec.Struct, frozen=True, kw_only=True):
    """A message the operator sent from `gormes top`, and whether it was read yet."""

    message_id: str
    run_id: str | None = None  # sent to this run's inbox (run.send) ...
    job_id: str | None = None  # ... or to this job's (job.send)
    read_seq: int | None = None  # the `run.inbox_read` that returned it
    read: bool = False


class WorkerRow(msgspec.Struct, frozen=True, kw_only=True):
    worker_id: str
    alive: bool
    last_seen_s_ago: float
    pid: int | None = None
    host: str | None = None
    concurrency: int | None = None
    queues: tuple[str, ...] | None = None  # None: every queue
    active_jobs: int = 0
    governor: GovernorState | None = None


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    taken_at: float  # seconds since the epoch
    head: int  # the log position the snapshot reflects (at least)
    by_status: dict[str, int]
    by_queue: tuple[QueueCounts, ...]
    jobs: tuple[JobRow, ...]
    runs: tuple[RunRow, ...]  # active runs (running or suspended)
    workers: tuple[WorkerRow, ...]
    tokens: Tokens  # every job's own tokens, each once (the ledger's per-model totals)
    breaker_trips: int = 0  # jobs the governor's circuit breaker killed
    providers: tuple[ProviderRow, ...] = ()  # each limit key's shared state (dashboard/providers.py)
    gateway: GatewayCalls | None = None  # the gateways' call rate (dashboard/gateway.py); None: never limited here
    approvals: tuple[ApprovalRow, ...] = ()  # pending approval requests, oldest first (dashboard/control.py)
    budgets: tuple[BudgetRow, ...] = ()  # every budget: spent, held, caps
    wasted: Tokens = Tokens()  # the part of `tokens` spent by attempts whose work was not kept
    cost: float | None = None  # `tokens` priced per model (None: a model without a price)
    wasted_cost: float | None = None
    pricing: str = ""  # the version of the table every cost here was priced with
    selected: str | None = None  # the selected job's id

    @property
    def total_jobs(self) -> int:
        return sum(self.by_status.values())

    @property
    def live_workers(self) -> int:
        return sum(1 for w in self.workers if w.alive)

    def with_selected(self, job_id: str | None) -> Snapshot:
        return msgspec.structs.replace(self, selected=job_id)


# -- assembling (pure) ------------------------------------------------------------

_encode = msgspec.json.Encoder()


def preview(value: Any, width: int = PROGRESS_WIDTH) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else _encode.encode(value).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


def count_statuses(rows: Iterable[tuple[str, str, int]]) -> tuple[dict[str, int], tuple[QueueCounts, ...]]:
    """(queue, status, n) rows -> the totals per status and the counts per queue."""
    by_status = {status: 0 for status in STATUSES}
    per_queue: dict[str, dict[str, int]] = {}
    for queue, status, n in rows:
        by_status[status] = by_status.get(status, 0) + n
        counts = per_queue.setdefault(queue, {s: 0 for s in STATUSES})
        counts[status] = counts.get(status, 0) + n
    queues = tuple(QueueCounts(queue=q, counts=c) for q, c in sorted(per_queue.items()))
    return by_status, queues


def order_jobs(jobs: Iterable[JobRow]) -> tuple[JobRow, ...]:
    """Live jobs first (active, waiting..., paused), newest first within each; then
    terminal ones, most recently finished first."""
    rank = {s: i for i, s in enumerate(
        ("active", "waiting-children", "waiting", "delayed", "paused")
    )}
    live = sorted(
        (j for j in jobs if j.status not in TERMINAL),
        key=lambda j: (rank.get(j.status, len(rank)), -j.created_at, j.id),
    )
    done = sorted(
        (j for j in jobs if j.status in TERMINAL), key=lambda j: (-j.updated_at, j.id)
    )
    return (*live, *done)


def _changes(value: Any) -> tuple[GovernorChange, ...]:
    try:
        return tuple(msgspec.convert(value or [], list[GovernorChange]))
    except msgspec.ValidationError:  # an older or foreign worker's shape: show none
        return ()


def governor_from_info(info: Any) -> GovernorState | None:
    """A worker's `governor` entry in its heartbeat info, if it reports one."""
    if not isinstance(info, dict) or not isinstance(info.get("governor"), dict):
        return None
    g = info["governor"]
    return GovernorState(
        limit=g.get("limit"), ceiling=g.get("ceiling"), cpu=g.get("cpu"),
        cpu_percent=g.get("cpu_percent"), memory_percent=g.get("memory_percent"),
        reason=g.get("reason"), recent=_changes(g.get("recent")),
    )


def governor_log(workers: Iterable[WorkerRow], limit: int = 5) -> list[tuple[str, GovernorChange]]:
    """The live workers' recent limit changes and breaker trips, newest first."""
    changes = [(w.worker_id, c) for w in workers if w.alive and w.governor for c in w.governor.recent]
    changes.sort(key=lambda wc: (-wc[1].at, wc[0]))
    return changes[:limit]


def receipt_seq(records: Iterable[Any], message_id: str) -> int | None:
    """The seq of the `run.inbox_read` among a run's events that returned `message_id`."""
    for record in records:
        event = record.event
        if isinstance(event, RunInboxRead) and any(m.id == message_id for m in event.messages):
            return event.seq
    return None


def worker_row(
    *, worker_id: str, pid: int | None, host: str | None, info: Any, last_seen: float,
    stopped_at: float | None, now: float, active_jobs: int,
) -> WorkerRow:
    info = info if isinstance(info, dict) else {}
    age = max(0.0, now - last_seen)
    queues = info.get("queues")
    return WorkerRow(
        worker_id=worker_id, pid=pid, host=host,
        alive=stopped_at is None and age <= STALE_AFTER_S,
        last_seen_s_ago=round(age, 1),
        concurrency=info.get("concurrency"),
        queues=tuple(queues) if isinstance(queues, list) else None,
        active_jobs=active_jobs,
        governor=governor_from_info(info),
    )
