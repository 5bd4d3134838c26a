"""Audit check: every day's audit hash chain is intact (gormes/events/audit_chain.py).

Recomputes every chain from the first day on (not incremental): an edited,
deleted, moved or inserted audit record is a failure naming the day and position.
"""

from __future__ import annotations

from gormes.events.audit_chain import verify_chains
from gormes.health import Check, DoctorContext, Verdict, fail, listing, ok


def check_chain(ctx: DoctorContext) -> Verdict:
    days = verify_chains(ctx.db, ctx.codec)
    broken = [d for d in days if d.first_break is not None]
    if not broken:
        sealed = sum(d.sealed for d in days)
        return ok(f"{len(days)} audit day(s), {sealed} sealed record(s), every chain intact")
    described = [
        f"{d.day} at position {d.first_break.position}: {d.first_break.reason}"  # type: ignore[union-attr]
        for d in broken
    ]
    return fail(
        f"audit chain broken on {len(broken)} day(s): {listing(described, 3)}",
        "someone or something changed the audit trail: run `gormes audit verify` for every break, "
        "compare with your anchored heads and a backup, and keep the database as evidence",
    )


CHECKS = [Check(name="audit.chain", category="audit", run=check_chain)]
