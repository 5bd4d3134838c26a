"""Gateway checks: the calls the gateways' call rate refused (`GORMES_GATEWAY_RATE`,
decisions 0072 and 0075).

A refused call is one audit record; they are counted from the index the database
keeps of them (gormes/control/call_refusals.py), the refusals of the last day at
most `call_refusals.COUNT_CAP` index entries, however long the log. Any refusal
in the window is a `warn`: a client was told to wait, which is either a client to
look at or a limit to raise. The limit itself is each `gormes mcp` process's
setting, which the store does not hold: the message gives the one the latest
refusal stated.
"""

from __future__ import annotations

from datetime import datetime, timezone

from gormes.control import call_refusals
from gormes.control.call_rate import GATEWAY_RATE_ENV, KEY, describe, stated_rule, written
from gormes.health import Check, DoctorContext, Verdict, age, ok, warn


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _hours(seconds: float) -> str:
    """`24h`: the window as `gormes audit export --since` takes it."""
    return f"{max(1, round(seconds / 3600))}h"


def check_call_rate(ctx: DoctorContext) -> Verdict:
    window = ctx.thresholds.gateway_refusals_window_s
    found = call_refusals.refusals(ctx.db, ctx.now - window)
    if found is None:
        limited = call_refusals.leases(ctx.db, KEY, 0.0).latest_at is not None
        if not limited:
            return ok(f"no gateway call has been limited on this database ({GATEWAY_RATE_ENV}, the call rate of"
                      " every gormes mcp serving the gateway class)")
        return warn(
            f"gateway calls are limited here ({GATEWAY_RATE_ENV}), but the calls refused cannot be counted:"
            f" the index of them ({call_refusals.INDEX}) is not made",
            "start the gormes mcp processes with this gormes: the first limited call of one makes the index "
            "(on PostgreSQL, its role must own the events table); until then `gormes audit export` lists the "
            "refusals (error CallRateLimited)",
        )
    span = _hours(window)
    if found.count == 0:
        return ok(f"no gateway call refused by the call rate ({GATEWAY_RATE_ENV}) in the last {span}")
    assert found.first_at is not None and found.last_at is not None
    count = f"more than {found.count:,}" if found.more else f"{found.count:,}"
    rule = stated_rule(found.last_error)
    limit = ("" if rule is None else
             f"; the process that refused it allows {describe(rule)} ({GATEWAY_RATE_ENV}={written(rule)})")
    return warn(
        f"{count} gateway call(s) refused by the call rate in the last {span}, since {_when(found.first_at)}"
        f" ({age(ctx.now - found.first_at)} ago); the latest {age(ctx.now - found.last_at)} ago,"
        f" to {found.last_caller}{limit}",
        f"each refusal is audited (`gormes audit export --since {span}` names the client of "
        f"each, error CallRateLimited): a client calling faster than it should is the client's to fix; if "
        f"the calls are wanted, raise {GATEWAY_RATE_ENV} (like 1200rpm or 50req/1s; off turns the limit off) "
        "in the environment of every gormes mcp serving gateways and restart them (each reads it when it "
        "starts); docs/security.md",
    )


CHECKS = [
    Check(name="gateway.call_rate", category="gateway", run=check_call_rate),
]
