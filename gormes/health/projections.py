"""Projection checks: how far each read model is behind the log, batches that
failed to apply (open rows of `projection_failures`), and whether the approvals
index was built by this gormes's rules (decision 0057)."""

from __future__ import annotations

from gormes.health import Check, DoctorContext, Verdict, fail, has_table, listing, ok, warn
from gormes.projections import approval_index, bookkeeping, registry


def _statuses(ctx: DoctorContext) -> list[bookkeeping.ProjectionStatus]:
    return bookkeeping.read_status(
        ctx.db, [(p.name, p.version) for p in registry.all_projections()]
    )


def check_lag(ctx: DoctorContext) -> Verdict:
    limit = ctx.thresholds.projection_lag_warn
    behind, stale = [], []
    for s in _statuses(ctx):
        lag = s.head if s.built_version is None else s.lag
        if lag > limit:
            built = "never built" if s.built_version is None else f"{lag} events behind"
            behind.append(f"{s.name} ({built})")
        if s.built_version is not None and s.built_version != s.version:
            stale.append(f"{s.name} (built by v{s.built_version}, code is v{s.version})")
    if not behind and not stale:
        return ok(f"every projection is within {limit} events of the head")
    parts = []
    if behind:
        parts.append(f"behind the log by more than {limit} events: {listing(behind)}")
    if stale:
        parts.append(f"built by another version (will be rebuilt): {listing(stale)}")
    return warn(
        "; ".join(parts),
        "read models lag until a runner folds them: make sure the daemon runs, "
        "or run `gormes projections rebuild NAME`",
    )


def check_failures(ctx: DoctorContext) -> Verdict:
    failing = [s for s in _statuses(ctx) if s.failures]
    if not failing:
        return ok("no failed projection batches")
    described = [f"{s.name}: {s.failures} failed batch(es), last: {s.last_error}" for s in failing]
    return fail(
        listing(described, 3),
        "the projection is stuck on those events until its code is fixed: see "
        "`gormes projections status`, fix the bug, then `gormes projections rebuild NAME`",
    )


def check_approval_index(ctx: DoctorContext) -> Verdict:
    """An index built by other rules is not read (its rows may be stale): until a
    store that may write builds it again, every approval read folds the whole
    stream. Only a read-only store leaves it so."""
    if not has_table(ctx.db, approval_index.TABLE):
        return ok("no approvals index yet: the first approvals read that may write builds it")
    built = bookkeeping.built_version(ctx.db, approval_index.NAME)
    if built == approval_index.VERSION:
        return ok(f"the approvals index is built by this gormes's rules (v{approval_index.VERSION})")
    by = "an older gormes (no version recorded)" if built is None else f"v{built}"
    return warn(
        f"the approvals index was built by {by}, this gormes builds v{approval_index.VERSION}:"
        " approval reads fold the whole `approvals` stream until it is built again",
        "open the database once where it may be written (`gormes approvals list`,"
        " or a worker's first sweep): that builds it again",
    )


CHECKS = [
    Check(name="projections.lag", category="projections", run=check_lag, needs_daemon=True),
    Check(name="projections.failures", category="projections", run=check_failures),
    Check(name="projections.approval_index", category="projections", run=check_approval_index),
]
