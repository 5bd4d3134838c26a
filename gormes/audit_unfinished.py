"""Calls started with no outcome recorded.

A write-ahead operation's call (decision 0062) is two audit records: `started`,
committed before its handler runs, then its outcome, which names the first by
its position (`started_position`). A `started` record that no record names is a
call whose process ended before its outcome was recorded (killed, crashed, or a
command that killed it), or one still running.

    calls = open_calls(conn, codec, since_ms)
    stale = [r for r in calls if not maybe_running(r, timeouts, now_ms)]

`open_calls` reads them from the open calls' index when it is current, as many
rows as there are open calls (gormes/events/audit_open.py, decision 0067), and
otherwise pairs the log's write-ahead records with `unfinished`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gormes.audit_export import AuditFilter, AuditRecord, read_audit, read_open_calls
from gormes.events import audit_open
from gormes.events.codec import Codec

NO_OUTCOME = "started, no outcome recorded"


def open_calls(conn: Any, codec: Codec, since_ms: int | None = None) -> list[AuditRecord]:
    """The calls started (at `since_ms` or later) with no outcome recorded, in log
    order: from the index when it is current; else from the write-ahead records of
    the audit days from `since_ms` on (a store no gormes of decision 0067 wrote, or
    one it could not make the index in)."""
    if audit_open.current(conn):
        return [r for r in read_open_calls(conn, codec) if since_ms is None or r.at >= since_ms]
    return unfinished(read_audit(conn, AuditFilter(since_ms=since_ms, write_ahead=True), codec))


def unfinished(records: Iterable[AuditRecord]) -> list[AuditRecord]:
    """The `started` records among `records` (in log order) that no later record
    names as its start."""
    open_calls: dict[int, AuditRecord] = {}
    for record in records:
        if record.outcome == "started":
            open_calls[record.position] = record
        elif record.started_position is not None:
            open_calls.pop(record.started_position, None)
    return list(open_calls.values())


def maybe_running(record: AuditRecord, timeouts: Mapping[str, float], now_ms: int) -> bool:
    """Whether the call may still be running: started less than its operation's
    timeout ago (an operation not known here: never)."""
    timeout = timeouts.get(record.operation)
    return timeout is not None and now_ms - record.at < timeout * 1000


def described(record: AuditRecord) -> str:
    """One line: when, what, who, where in the log."""
    return (f"{record.time}  {record.operation}  by {record.caller} ({record.trust})"
            f"  position {record.position}: {NO_OUTCOME}")
