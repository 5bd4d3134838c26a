"""`gormes top`'s gateway line: what the gateways' call rate counts and refused
(`GORMES_GATEWAY_RATE`, decisions 0072 and 0075).

Read from the leases of the key `calls:gateway` (each admitted call takes one) and
from the refusals' audit records, through the index the database keeps of them
(gormes/control/call_refusals.py): a few index ranges, none longer than the limit's
count of leases or `COUNT_CAP` refusals, whatever the log holds. The limit is each
`gormes mcp` process's setting and is not stored: it is shown as the latest
refusal in the window stated it, and not at all when there was none.

A lease is one admitted call, and leases are only ever deleted (by a look, once
past its process's window), so the leases younger than a minute are the calls of
the last minute when no process's window is shorter; when the latest refusal
states a shorter one, the minute's count is not shown, only its window's. The row
and its drawing are pure.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from rich.text import Text

from gormes.control import call_refusals
from gormes.control.call_rate import GATEWAY_RATE_ENV, KEY, stated_rule, stated_share, written
from gormes.printable import printable

CALLS_WINDOW_S = 60.0  # the calls shown: those admitted in the last minute
REFUSED_WINDOW_S = 3600.0  # the refusals shown: those of the last hour


class GatewayCalls(msgspec.Struct, frozen=True, kw_only=True):
    """The gateway class's calls, every `gormes mcp` process's together."""

    # Admitted in the last minute, counted by their leases; None when the latest
    # refusal states a window shorter than a minute, whose process deletes the
    # leases past it (the minute's calls are then not known; `counted` is).
    calls_last_minute: int | None
    last_call_s_ago: float | None = None  # the latest lease held; None: none held
    refused_window_s: float = REFUSED_WINDOW_S
    refused: int | None = None  # refused in the window; None: not counted (no index of them)
    refused_more: bool = False  # the count stopped at call_refusals.COUNT_CAP: there were more
    first_refused_s_ago: float | None = None  # the first refusal in the window
    last_refused_s_ago: float | None = None
    last_refused_caller: str | None = None  # "mcp:<client name>", as the client named itself
    # The setting the latest refusal in the window stated (each process has its own;
    # the store holds none): None when no refusal states one.
    limit: str | None = None  # "600rpm"
    limit_calls: int | None = None
    limit_window_s: float | None = None
    counted: int | None = None  # the calls that limit's window counts now (leases younger than it)
    # Each client's share of that limit, when the latest refusal was its client's share's
    # (GORMES_GATEWAY_CLIENT_RATE, decision 0082): "150rpm"; None otherwise.
    share: str | None = None


def gateway_calls(conn: Any, now: float) -> GatewayCalls | None:
    """The gateway line's row; None when no gateway call has been limited on this
    database (no lease of the key, no index of the refusals)."""
    refused = call_refusals.refusals(conn, now - REFUSED_WINDOW_S)
    recent = call_refusals.leases(conn, KEY, now - CALLS_WINDOW_S)
    if refused is None and recent.latest_at is None:
        return None
    rule = None if refused is None else stated_rule(refused.last_error)
    share = None if refused is None else stated_share(refused.last_error)
    counted = None
    if rule is not None:
        counted = (recent.recent if rule.window_s == CALLS_WINDOW_S
                   else call_refusals.leases(conn, KEY, now - rule.window_s).recent)
    return GatewayCalls(
        calls_last_minute=None if rule is not None and rule.window_s < CALLS_WINDOW_S else recent.recent,
        last_call_s_ago=None if recent.latest_at is None else _ago(now, recent.latest_at),
        refused=None if refused is None else refused.count,
        refused_more=refused is not None and refused.more,
        first_refused_s_ago=None if refused is None or refused.first_at is None else _ago(now, refused.first_at),
        last_refused_s_ago=None if refused is None or refused.last_at is None else _ago(now, refused.last_at),
        last_refused_caller=None if refused is None else refused.last_caller,
        limit=None if rule is None else written(rule), limit_calls=None if rule is None else rule.requests,
        limit_window_s=None if rule is None else rule.window_s, counted=counted,
        share=None if share is None else written(share),
    )


def _ago(now: float, at: float) -> float:
    return round(max(0.0, now - at), 1)


# -- drawing (pure) ----------------------------------------------------------------------


def _age(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else \
        f"{seconds / 3600:.0f} h"


def gateway_line(row: GatewayCalls | None) -> Text | None:
    """Two lines, each cut to the screen's width:

        gateway calls: 37 in the last minute (the latest 2s ago)  limit 600rpm, as the latest refusal stated it: 37 of 600 counted in its window
          refused in the last hour: 120 (since 14 min ago; the latest 3s ago, to "mcp:bot")

    None: no line (no gateway call has been limited on this database)."""
    if row is None:
        return None
    line = Text("gateway calls: ", style="bold", no_wrap=True, overflow="ellipsis")
    latest = "" if row.last_call_s_ago is None else f" (the latest {_age(row.last_call_s_ago)} ago)"
    if row.calls_last_minute is not None:
        line.append(f"{row.calls_last_minute} in the last minute{latest}")
    else:
        line.append(f"last minute: not known (its window keeps no older lease){latest}", style="dim")
    window = "hour" if row.refused_window_s == REFUSED_WINDOW_S else _age(row.refused_window_s)
    if row.limit is not None:
        line.append(f"  limit {row.limit}, as the latest refusal stated it: {row.counted} of {row.limit_calls}"
                    " counted in its window")
        if row.share is not None:
            line.append(f"; it was a client's share that refused it ({row.share} each)")
    else:
        line.append(f"  limit: each gormes mcp's {GATEWAY_RATE_ENV}, not recorded (a refusal states it)", style="dim")
    line.append("\n  ")
    if row.refused is None:
        line.append("refused: not counted (no index of them yet: the first limited call of a gormes mcp of this"
                    " version makes it)", style="dim")
    elif row.refused == 0:
        line.append(f"none refused in the last {window}")
    else:
        count = f"more than {row.refused:,}" if row.refused_more else f"{row.refused:,}"
        # quoted as JSON quotes it: a client names itself (decision 0079)
        to = "" if row.last_refused_caller is None else f", to {json.dumps(row.last_refused_caller, ensure_ascii=False)}"
        line.append(f"refused in the last {window}: ")
        line.append(printable(f"{count} (since {_age(row.first_refused_s_ago or 0.0)} ago; the latest "
                              f"{_age(row.last_refused_s_ago or 0.0)} ago{to})"), style="bold yellow")
    return line
