"""Worker checks: heartbeats (live or stale) and circuit-breaker trips.

A worker is live when its `worker_heartbeats` row has no `stopped_at` and was
refreshed within `heartbeat_stale_s`; nothing else counts as alive. Each beat
also records the governor's report (limit, floor, ceiling, last load sample, the
last decision's reason and recent changes), which `workers.governor` reads
(gormes/health/governor.py).
"""

from __future__ import annotations

import msgspec

from gormes.actors.jobs.governor import BREAKER_ERROR
from gormes.actors.jobs.heartbeat import TABLE as HEARTBEATS
from gormes.health import (
    Check,
    DoctorContext,
    Verdict,
    age,
    has_table,
    listing,
    ok,
    warn,
)
from gormes.health.governor import GovernorState, check_governors


class WorkerBeat(msgspec.Struct, frozen=True):
    worker_id: str
    last_seen: float
    stopped_at: float | None
    queues: list[str] | None  # None: every queue
    names: list[str] | None  # job names it has handlers for; None: unknown
    governor: GovernorState | None = None  # None: governor off (or an older worker)


class _Info(msgspec.Struct):
    queues: list[str] | None = None
    names: list[str] | None = None
    governor: GovernorState | None = None


def read_heartbeats(ctx: DoctorContext) -> list[WorkerBeat]:
    if not has_table(ctx.db, HEARTBEATS):
        return []
    beats = []
    for worker_id, last_seen, stopped_at, info in ctx.db.execute(
        f"SELECT worker_id, last_seen, stopped_at, info FROM {HEARTBEATS} ORDER BY worker_id"
    ):
        try:
            parsed = msgspec.json.decode(info or "{}", type=_Info)
        except msgspec.MsgspecError:
            parsed = _Info()
        beats.append(WorkerBeat(worker_id, last_seen, stopped_at, parsed.queues, parsed.names,
                                parsed.governor))
    return beats


def is_live(ctx: DoctorContext, beat: WorkerBeat) -> bool:
    return beat.stopped_at is None and ctx.now - beat.last_seen <= ctx.thresholds.heartbeat_stale_s


def check_heartbeats(ctx: DoctorContext) -> Verdict:
    beats = read_heartbeats(ctx)
    live = [b for b in beats if is_live(ctx, b)]
    window = ctx.thresholds.crashed_worker_window_s
    crashed = [
        b for b in beats
        if b.stopped_at is None and not is_live(ctx, b) and ctx.now - b.last_seen <= window
    ]
    crashed_text = listing([f"{b.worker_id} (last beat {age(ctx.now - b.last_seen)} ago)" for b in crashed])
    if crashed:
        return warn(
            f"{len(live)} live worker(s); {len(crashed)} stopped beating without saying they "
            f"stopped (crashed or killed): {crashed_text}",
            "look at the daemon's logs (journalctl -u gormes); their jobs are requeued by "
            "any live worker's stall sweep",
        )
    if not live:
        return warn(
            "no live worker: waiting jobs will not run"
            + ("" if beats else " (no worker has ever run on this database)"),
            "start the daemon (`systemctl start gormes`) or a worker (`gormes worker`); "
            "use --offline to skip checks of live processes",
        )
    return ok(f"{len(live)} live worker(s): {listing([b.worker_id for b in live])}")


def check_governor(ctx: DoctorContext) -> Verdict:
    """Each live worker's limit and the reason for it (gormes/health/governor.py)."""
    return check_governors([(b.worker_id, b.governor) for b in read_heartbeats(ctx) if is_live(ctx, b)])


def check_breaker(ctx: DoctorContext) -> Verdict:
    window = ctx.thresholds.breaker_window_s
    if not has_table(ctx.db, "jobs"):
        return ok("no job ledger yet: no circuit-breaker trip is possible")
    since_ms = int((ctx.now - window) * 1000)
    ids = [row[0] for row in ctx.db.execute(
        "SELECT id FROM jobs WHERE status = 'dead' AND error = ? AND finished_at >= ? "
        "ORDER BY finished_at DESC", (BREAKER_ERROR, since_ms),
    )]
    if not ids:
        return ok(f"no circuit-breaker trip in the last {age(window)}")
    return warn(
        f"the circuit breaker killed {len(ids)} job(s) for memory pressure in the last "
        f"{age(window)}: {listing(ids)}",
        "the host runs out of memory: lower the worker's --concurrency, add memory, or find "
        "the job that grows; retry the killed jobs with `gormes jobs retry ID`",
    )


CHECKS = [
    Check(name="workers.heartbeats", category="workers", run=check_heartbeats, needs_daemon=True),
    Check(name="workers.governor", category="workers", run=check_governor, needs_daemon=True),
    Check(name="workers.circuit_breaker", category="workers", run=check_breaker),
]
