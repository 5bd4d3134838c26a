"""Queue checks over the job ledger (`jobs`): stalled leases, dead letters, the
oldest waiting job, depth per queue, and wedged queues.

Ledger times are milliseconds since the epoch. A queue is wedged when it has
waiting jobs that no live worker can claim (see workers.is_live: a stale
heartbeat row is not a live worker) and nothing in it completed for
`wedged_after_s`.
"""

from __future__ import annotations

from gormes.events.job_machine import HELD, LIVE
from gormes.health import (
    Check,
    DoctorContext,
    Verdict,
    age,
    count_events,
    fail,
    has_table,
    listing,
    ok,
    warn,
)
from gormes.health.workers import WorkerBeat, is_live, read_heartbeats
from gormes.projections.ledger import status_in

START_WORKER = "start the daemon (`systemctl start gormes`) or a worker (`gormes worker --queue Q`)"


def _no_ledger(ctx: DoctorContext) -> Verdict | None:
    """The verdict when there is no `jobs` table: fine with no job events, not with some."""
    if has_table(ctx.db, "jobs"):
        return None
    events = count_events(ctx.db, "job.*")
    if events:
        return warn(
            f"{events} job event(s) in the log but no job ledger table",
            "any job command builds it (`gormes jobs stats`), or `gormes projections rebuild ledger`",
        )
    return ok("no job ledger yet: no job was ever submitted")


def check_stalled(ctx: DoctorContext) -> Verdict:
    if (verdict := _no_ledger(ctx)) is not None:
        return verdict
    grace = ctx.thresholds.stall_grace_ms
    ids = [row[0] for row in ctx.db.execute(
        f"SELECT id FROM jobs WHERE {status_in(HELD)} "
        "AND lock_until IS NOT NULL AND lock_until + ? < ? ORDER BY lock_until",
        (grace, ctx.now_ms),
    )]
    if not ids:
        return ok("no stalled job")
    return warn(
        f"{len(ids)} job(s) hold a lease that expired over {grace / 1000:g}s ago "
        f"(their worker died): {listing(ids)}",
        f"a live worker's stall sweep requeues them without losing attempts: {START_WORKER}",
    )


def check_dead_letters(ctx: DoctorContext) -> Verdict:
    if (verdict := _no_ledger(ctx)) is not None:
        return verdict
    rows = ctx.db.execute(
        "SELECT queue, count(*) FROM jobs WHERE status = 'dead' GROUP BY queue ORDER BY queue"
    ).fetchall()
    if not rows:
        return ok("no dead job")
    total = sum(n for _, n in rows)
    return warn(
        f"{total} dead job(s) (attempts used up, unrecoverable, timed out or stalled too often): "
        + listing([f"{q}: {n}" for q, n in rows]),
        "inspect them with `gormes jobs list --status dead`, then `gormes jobs retry ID` "
        "or `gormes jobs prune --older-than D`",
    )


def check_oldest_waiting(ctx: DoctorContext) -> Verdict:
    if (verdict := _no_ledger(ctx)) is not None:
        return verdict
    row = ctx.db.execute(
        "SELECT id, queue, coalesce(updated_at, created_at) AS since FROM jobs "
        "WHERE status = 'waiting' ORDER BY since, id LIMIT 1"
    ).fetchone()
    if row is None:
        return ok("no waiting job")
    job_id, queue, since = row
    waited = ctx.now - since / 1000
    limit = ctx.thresholds.oldest_waiting_warn_s
    text = f"oldest waiting job {job_id} (queue {queue}) has waited {age(waited)}"
    if waited <= limit:
        return ok(text)
    return warn(
        f"{text}, over {age(limit)}",
        f"workers do not keep up or none serves the queue: {START_WORKER}, or raise --concurrency",
    )


def check_depth(ctx: DoctorContext) -> Verdict:
    if (verdict := _no_ledger(ctx)) is not None:
        return verdict
    depth: dict[str, dict[str, int]] = {}
    for queue, status, n in ctx.db.execute(
        f"SELECT queue, status, count(*) FROM jobs WHERE {status_in(LIVE)} "
        "GROUP BY queue, status ORDER BY queue"
    ):
        depth.setdefault(queue, {})[status] = n
    if not depth:
        return ok("every queue is empty")
    text = "; ".join(
        f"{q}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        for q, counts in depth.items()
    )
    limit = ctx.thresholds.queue_depth_warn
    deep = [q for q, counts in depth.items() if counts.get("waiting", 0) > limit]
    if not deep:
        return ok(text)
    return warn(
        f"over {limit} waiting in {listing(deep)} ({text})",
        "add workers or concurrency for those queues, or find what floods them",
    )


def _serves(beat: WorkerBeat, queue: str, name: str) -> bool:
    return (beat.queues is None or queue in beat.queues) and (beat.names is None or name in beat.names)


def check_wedged(ctx: DoctorContext) -> Verdict:
    if (verdict := _no_ledger(ctx)) is not None:
        return verdict
    waiting: dict[str, dict[str, int]] = {}
    for queue, name, n in ctx.db.execute(
        "SELECT queue, name, count(*) FROM jobs WHERE status = 'waiting' GROUP BY queue, name"
    ):
        waiting.setdefault(queue, {})[name] = n
    if not waiting:
        return ok("no waiting job, so no queue can be wedged")
    beats = read_heartbeats(ctx)
    live = [b for b in beats if is_live(ctx, b)]
    window = ctx.thresholds.wedged_after_s
    since_ms = int((ctx.now - window) * 1000)
    wedged = []
    for queue, names in sorted(waiting.items()):
        unserved = sorted(n for n in names if not any(_serves(b, queue, n) for b in live))
        if not unserved:
            continue
        completed = ctx.db.execute(
            "SELECT count(*) FROM jobs WHERE queue = ? AND status = 'completed' AND finished_at >= ?",
            (queue, since_ms),
        ).fetchone()[0]
        if completed:
            continue
        jobs = sum(names[n] for n in unserved)
        wedged.append(f"{queue} ({jobs} waiting: {listing(unserved, 3)})")
    if not wedged:
        return ok(f"every queue with waiting jobs has a live worker ({len(live)} live)")
    if live:
        who = f"{len(live)} live worker(s), none with a handler for them"
    elif beats:
        last = max(b.last_seen for b in beats)
        who = f"no live worker (last heartbeat {age(ctx.now - last)} ago)"
    else:
        who = "no worker has ever run"
    return fail(
        f"wedged: {listing(wedged, 3)}; {who}; nothing completed there for {age(window)}",
        f"{START_WORKER} with handlers for those job names (`--import MODULE`)",
    )


CHECKS = [
    Check(name="queue.stalled", category="queue", run=check_stalled),
    Check(name="queue.dead_letters", category="queue", run=check_dead_letters),
    Check(name="queue.oldest_waiting", category="queue", run=check_oldest_waiting),
    Check(name="queue.depth", category="queue", run=check_depth),
    Check(name="queue.wedged", category="queue", run=check_wedged, needs_daemon=True),
]
