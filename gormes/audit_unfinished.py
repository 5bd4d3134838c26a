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
otherwise pairs the log's write-ahead records with `unfinished`. `find_open_calls`
says which it did, and `scan_note` says it to the operator.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from gormes.audit_export import AuditFilter, AuditRecord, read_audit, read_open_calls
from gormes.events import audit_open
from gormes.events.codec import Codec

NO_OUTCOME = "started, no outcome recorded"


class OpenCalls(NamedTuple):
    calls: list[AuditRecord]
    index: str  # the index's `audit_open.state`: anything but CURRENT means the log was scanned
    scanned: int  # the write-ahead records read from the log (0 from the index)


def find_open_calls(conn: Any, codec: Codec, since_ms: int | None = None) -> OpenCalls:
    """The calls started (at `since_ms` or later) with no outcome recorded, in log
    order: from the index when it is current; else from the write-ahead records of
    the audit days from `since_ms` on (a store no gormes of decision 0067 wrote, or
    one it could not make the index in). With how they were read."""
    index = audit_open.state(conn)
    if index == audit_open.CURRENT:
        return OpenCalls([r for r in read_open_calls(conn, codec) if since_ms is None or r.at >= since_ms], index, 0)
    scanned = 0

    def counted(records: Iterable[AuditRecord]) -> Iterator[AuditRecord]:
        nonlocal scanned
        for record in records:
            scanned += 1
            yield record

    calls = unfinished(counted(read_audit(conn, AuditFilter(since_ms=since_ms, write_ahead=True), codec)))
    return OpenCalls(calls, index, scanned)


def open_calls(conn: Any, codec: Codec, since_ms: int | None = None) -> list[AuditRecord]:
    """`find_open_calls`' calls."""
    return find_open_calls(conn, codec, since_ms).calls


def scan_note(found: OpenCalls) -> str | None:
    """How the calls were read, when not from the index: None when they were."""
    if found.index == audit_open.CURRENT:
        return None
    why = ("this session may not read the open calls' index" if found.index == audit_open.UNREADABLE
           else "the open calls' index is not built")
    return f"read by scanning {found.scanned} write-ahead record(s) of the log: {why}"


def index_hint(index: str) -> str:
    """What makes the index readable again, for a reader that found it `index`."""
    if index == audit_open.UNREADABLE:
        return f"grant this database role SELECT on {audit_open.TABLE}"
    return ("the next write-ahead call (shell.run, knowledge.write, memory.mirror, projections.rebuild) "
            "of a gormes that may write this database builds it (on PostgreSQL, its role must be allowed "
            "to create a table in the schema)")


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
