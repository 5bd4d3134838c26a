"""Provider checks: the outage guard and the shared back-off, from `provider_limits`
(gormes/control/limits_table.py), one row per limit key (`openai:gpt-4o-mini`).

An open guard is a `fail`: new model turns are halted for everyone until a probe
succeeds. A back-off in force (a provider's `retry-after`) is a `warn`: it ends
by itself.
"""

from __future__ import annotations

from gormes.control.limits_table import LIMITS, all_states
from gormes.health import Check, DoctorContext, Verdict, age, fail, has_table, listing, ok, warn


def check_outage(ctx: DoctorContext) -> Verdict:
    if not has_table(ctx.db, LIMITS):
        return ok("no model turn has gone through the provider limits yet")
    states = all_states(ctx.db)
    down = [s for s in states if s.is_open]
    if down:
        described = [
            f"{s.key} (halted {age(ctx.now - (s.open_since or ctx.now))} after {s.failures} failures in a row; "
            f"{'a probe in flight' if s.probing(ctx.now) else 'waiting to probe'}; last: {s.last_error})"
            for s in down
        ]
        return fail(
            f"{len(down)} provider(s) failing for everyone: new model turns are halted, one probe at a "
            f"time: {listing(described)}",
            "look at the provider's status page, the base URL and the API key; the guard closes by "
            "itself at the first probe that gets a reply (GORMES_OUTAGE_AFTER=0 turns it off)",
        )
    blocked = [s for s in states if s.blocked(ctx.now)]
    if blocked:
        described = [f"{s.key} for {age((s.blocked_until or ctx.now) - ctx.now)} more ({s.blocked_reason})"
                     for s in blocked]
        return warn(
            f"every caller backs off {listing(described)}",
            "a provider asked for it (retry-after): it ends by itself; if it keeps coming back, set a "
            "rate limit below the provider's quota (GORMES_RATE_LIMITS, docs/control.md)",
        )
    failing = [f"{s.key} ({s.failures} in a row)" for s in states if s.failures]
    tail = f"; retryable failures lately: {listing(failing)}" if failing else ""
    return ok(f"{len(states)} provider key(s), none halted or backing off{tail}")


CHECKS = [
    Check(name="providers.outage", category="providers", run=check_outage),
]
