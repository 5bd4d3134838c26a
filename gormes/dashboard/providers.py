"""`gormes top`'s providers panel: each limit key's shared state (the outage guard,
a back-off everyone waits out, the rate window's use), from `provider_limits` and
`rate_leases` (gormes/control/limits_table.py). Reading is one query each; the
row and its drawing are pure.
"""

from __future__ import annotations

from typing import Any

import msgspec
from rich.text import Text

from gormes.control import limits_table
from gormes.printable import printable

USAGE_WINDOW_S = 60.0  # the rate window top shows: the last minute's leases


class ProviderRow(msgspec.Struct, frozen=True, kw_only=True):
    key: str  # `openai:gpt-4o-mini`
    state: str  # "ok", "backing off", "outage"
    failures: int = 0  # consecutive retryable failures, every caller's
    open_s: float | None = None  # how long the outage guard has been open
    probing: bool = False  # a probe is in flight
    blocked_s: float | None = None  # how long everyone still waits (a retry-after)
    requests: int = 0  # leased in the last minute
    tokens: int = 0
    last_error: str | None = None


def provider_rows(conn: Any, now: float, tables: set[str]) -> tuple[ProviderRow, ...]:
    if limits_table.LIMITS not in tables:
        return ()
    usage = limits_table.window_usage(conn, now - USAGE_WINDOW_S) if limits_table.LEASES in tables else {}
    rows = []
    for s in limits_table.all_states(conn):
        state = "outage" if s.is_open else "backing off" if s.blocked(now) else "ok"
        requests, tokens = usage.get(s.key, (0, 0))
        rows.append(ProviderRow(
            key=s.key, state=state, failures=s.failures,
            open_s=round(now - s.open_since, 1) if s.open_since is not None else None,
            probing=s.probing(now),
            blocked_s=round(s.blocked_until - now, 1) if s.blocked(now) and s.blocked_until else None,
            requests=requests, tokens=tokens, last_error=s.last_error if state != "ok" or s.failures else None,
        ))
    return tuple(rows)


STYLE = {"ok": "green", "backing off": "yellow", "outage": "bold red"}


def provider_cells(row: ProviderRow) -> list[Any]:
    if row.state == "outage":
        what = f"halted {row.open_s:.0f}s: {'a probe in flight' if row.probing else 'waiting to probe'}"
    elif row.state == "backing off":
        what = f"everyone waits {row.blocked_s:.0f}s more"
    else:
        what = f"{row.failures} failure(s) in a row" if row.failures else ""
    return [
        Text(printable(row.key)), Text(row.state, style=STYLE.get(row.state, "")), Text(what),
        Text(f"{row.requests} req, {row.tokens:,} tok"), Text(printable(row.last_error or "")),
    ]
