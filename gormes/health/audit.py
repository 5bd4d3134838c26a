"""Audit check: every day's audit hash chain is intact (gormes/events/audit_chain.py).

An edited, deleted, moved or inserted audit record is a failure naming the day and
position. Days before the last one the previous doctor run saw were verified then
and take no new records (a record goes to its own day), so only that day and the
ones after it are walked again (gormes/health/scan.py); `--full` walks every day.
"""

from __future__ import annotations

from gormes.events.audit_chain import DayChain, verify_chains
from gormes.health import Check, DoctorContext, Verdict, fail, listing, ok


def check_chain(ctx: DoctorContext) -> Verdict:
    summary = ctx.log
    if ctx.full or summary.audit_day is None:
        summary.audit_day, summary.audit_days_before, summary.audit_sealed_before = None, 0, 0
        summary.audit_broken_before = []
    days = verify_chains(ctx.db, ctx.codec, since_day=summary.audit_day)
    described = list(summary.audit_broken_before) + [_described(d) for d in days if d.first_break is not None]
    count = summary.audit_days_before + len(days)
    sealed = summary.audit_sealed_before + sum(d.sealed for d in days)
    if days:
        closed = days[:-1]
        summary.audit_day = days[-1].day
        summary.audit_days_before += len(closed)
        summary.audit_sealed_before += sum(d.sealed for d in closed)
        summary.audit_broken_before += [_described(d) for d in closed if d.first_break is not None]
    if not described:
        return ok(f"{count} audit day(s), {sealed} sealed record(s), every chain intact")
    return fail(
        f"audit chain broken on {len(described)} day(s): {listing(described, 3)}",
        "someone or something changed the audit trail: run `gormes audit verify` for every break, "
        "compare with your anchored heads and a backup, and keep the database as evidence",
    )


def _described(d: DayChain) -> str:
    return f"{d.day} at position {d.first_break.position}: {d.first_break.reason}"  # type: ignore[union-attr]


CHECKS = [Check(name="audit.chain", category="audit", run=check_chain)]
