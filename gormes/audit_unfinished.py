"""Calls started with no outcome recorded.

A write-ahead operation's call (decision 0062) is two audit records: `started`,
committed before its handler runs, then its outcome, which names the first by
its position (`started_position`). A `started` record that no record names is a
call whose process ended before its outcome was recorded (killed, crashed, or a
command that killed it), or one still running.

    open_calls = unfinished(read_audit(conn, AuditFilter(write_ahead=True), codec))
    stale = [r for r in open_calls if not maybe_running(r, timeouts, now_ms)]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gormes.audit_export import AuditRecord

NO_OUTCOME = "started, no outcome recorded"


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
