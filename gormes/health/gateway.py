"""Gateway checks: the calls the gateways' call rate refused (`GORMES_GATEWAY_RATE`,
decisions 0072 and 0075).

A refused call is one audit record; they are counted from the index the database
keeps of them (gormes/control/call_refusals.py), the refusals of the last day at
most `call_refusals.COUNT_CAP` index entries, however long the log. Any refusal
in the window is a `warn`: a client was told to wait, which is either a client to
look at or a limit to raise. The limit itself is each `gormes mcp` process's
setting, which the store does not hold: the message gives the one the latest
refusal stated, and the client's share when that share refused it (decision 0082). Whom they were refused to: the clients refused most among the
latest `COUNT_CAP` refusals (`call_refusals.refused_callers`, decision 0079), in
the message and in `--json`'s `detail`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from gormes.control import call_refusals
from gormes.control.call_rate import GATEWAY_RATE_ENV, KEY, describe, stated_rule, stated_share, written
from gormes.control.call_shares import CLIENT_RATE_ENV
from gormes.health import Check, DoctorContext, Verdict, age, ok, warn

# A client names itself: its name is shown cut to this many characters in the message
# (MAX_NAME in the JSON: what `gormes mcp` records of a name, mcp_server.MAX_CLIENT_NAME).
SHOWN_NAME = 60
MAX_NAME = 200


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
        return ok(f"no gateway call refused by the call rate ({GATEWAY_RATE_ENV}) in the last {span}",
                  {"window_s": window, "refused": 0, "refused_more": False, "clients": [], "other_clients": 0,
                   "other_refused": 0, "clients_read": 0})
    callers = call_refusals.refused_callers(ctx.db, ctx.now - window)
    assert found.first_at is not None and found.last_at is not None
    count = f"more than {found.count:,}" if found.more else f"{found.count:,}"
    rule, share = stated_rule(found.last_error), stated_share(found.last_error)
    each = "" if share is None else f"each client {describe(share)} ({CLIENT_RATE_ENV}={written(share)}) of "
    limit = ("" if rule is None else
             f"; the process that refused it allows {each}{describe(rule)} ({GATEWAY_RATE_ENV}={written(rule)})")
    return warn(
        f"{count} gateway call(s) refused by the call rate in the last {span}, since {_when(found.first_at)}"
        f" ({age(ctx.now - found.first_at)} ago); the latest {age(ctx.now - found.last_at)} ago,"
        f" to {_quoted(found.last_caller)}{limit}{_most(callers)}",
        f"each refusal is audited (`gormes audit export --since {span}` names the client of "
        f"each, error CallRateLimited): a client calling faster than it should is the client's to fix; if "
        f"the calls are wanted, raise {GATEWAY_RATE_ENV} (like 1200rpm or 50req/1s; off turns the limit off) "
        "in the environment of every gormes mcp serving gateways and restart them (each reads it when it "
        f"starts); a client refused past its own share ({CLIENT_RATE_ENV}, a quarter of the class's by "
        "default) while the others are served is calling faster than they are: raise the share the same way, "
        "or set it off; docs/security.md",
        _detail(window, found, callers),
    )


def _most(callers: call_refusals.ByCaller | None) -> str:
    """`; refused most to "mcp:a" (40), "mcp:b" (2) and 3 other client(s) (5)`: each
    name quoted and escaped, as JSON writes it, so none can pass for the list's own text.
    Nothing when one client was refused them all: the message names it already."""
    if callers is None or len(callers.top) + callers.others < 2:
        return ""
    names = ", ".join(f"{_quoted(c)} ({n:,})" for c, n in callers.top)
    rest = f" and {callers.others:,} other client(s) ({callers.others_refused:,})" if callers.others else ""
    among = f" among the latest {callers.read:,}" if callers.read >= call_refusals.COUNT_CAP else ""
    return f"; refused most{among} to {names}{rest}"


def _detail(window: float, found: call_refusals.Refusals, callers: call_refusals.ByCaller | None) -> dict[str, object]:
    """`--json`'s figures: the count, and the clients refused most among the refusals
    read for them (`clients_read`: all of the window's, or its latest COUNT_CAP)."""
    top = [] if callers is None else callers.top
    return {"window_s": window, "refused": found.count, "refused_more": found.more,
            "clients": [{"client": _cut(c, MAX_NAME), "refused": n} for c, n in top],
            "other_clients": 0 if callers is None else callers.others,
            "other_refused": 0 if callers is None else callers.others_refused,
            "clients_read": 0 if callers is None else callers.read}


def _quoted(name: str) -> str:
    """A client's name as JSON quotes it, cut to SHOWN_NAME: a client names itself,
    and its name must not pass for the message's own words."""
    return json.dumps(_cut(name, SHOWN_NAME), ensure_ascii=False)


def _cut(name: str, limit: int) -> str:
    return name if len(name) <= limit else name[:limit - 1] + "\u2026"


CHECKS = [
    Check(name="gateway.call_rate", category="gateway", run=check_call_rate),
]
