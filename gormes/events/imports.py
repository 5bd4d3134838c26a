"""What `gormes import` brought in: one `log.imported` record per import (decision 0087).

The import writes it on `log-imports` in its own transaction, after the lines it
appended: the position range they took, the file's name and sha256, the caller,
and the audit days it brought records to. An audit record whose position lies in
such a range was sealed by another log (or forged) and copied in; one outside
every range was sealed here, by this log's writers. `gormes audit verify` and
the doctor read these few records, not the log, to say so per day
(gormes/events/audit_chain.py).

Only the import writes them: an import leaves out the `log.imported` lines a file
brings (they describe the positions of the log it came from, and would otherwise
be a file's word on what this log sealed) and refuses any other line on
`log-imports`; `gormes append` refuses both, and `gormes redact` never touches
the stream. A migration copies them with the rest of the log, at the same
positions, so they say the same there.

    ranges = ImportRanges(read_imports(conn, codec))
    marker = ranges.of(position)   # the LogImported whose range holds it, or None
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from typing import Any

import msgspec

from gormes.events.base import Event
from gormes.events.codec import Codec
from gormes.events.postgres_sql import iter_rows

IMPORTS_STREAM = "log-imports"
IMPORTED_TYPE = "log.imported"


class AuditDay(msgspec.Struct, frozen=True, kw_only=True):
    """An audit day an import brought records to: how many, at which versions."""

    stream: str  # audit-YYYY-MM-DD
    records: int
    first_version: int
    last_version: int


class LogImported(Event, tag="log.imported", kw_only=True):
    """One import: the positions its lines took (`first_position`..`last_position`),
    which file (as named, and the sha256 of its bytes; None for records handed
    over parsed), who imported it, and the audit days it brought records to.
    `left_out`: the file's own `log.imported` lines, not brought in."""

    first_position: int
    last_position: int
    imported: int
    name: str | None = None
    sha256: str | None = None
    caller: str
    trust: str
    at: float
    audit_days: tuple[AuditDay, ...] = ()
    left_out: int = 0


class Marker(msgspec.Struct, frozen=True, kw_only=True):
    """A `log.imported` record as verify names it: its position and what it says."""

    position: int
    event: LogImported


def is_marker_line(stream: str, type_: str) -> bool:
    """A line no file may bring: a `log.imported`, or anything on `log-imports`."""
    return type_ == IMPORTED_TYPE or stream == IMPORTS_STREAM


def read_imports(conn: Any, codec: Codec) -> list[Marker]:
    """Every `log.imported` record of the log (an sqlite3 connection or a
    PortableConnection), by the stream's index: as many rows as imports."""
    sql = "SELECT position, type, type_version, data FROM events WHERE stream = ? ORDER BY version"
    found = []
    for position, type_, type_version, data in iter_rows(conn, sql, [IMPORTS_STREAM]):
        try:
            event = codec.decode(type_, type_version, data)
        except Exception:  # noqa: BLE001 - only the import writes here; a row it cannot read names no range
            continue
        if isinstance(event, LogImported):
            found.append(Marker(position=position, event=event))
    return found


class ImportRanges:
    """Which import, if any, brought the record at a position (pure: no I/O)."""

    def __init__(self, markers: Iterable[Marker]) -> None:
        spans = sorted((m.event.first_position, m.event.last_position, m) for m in markers
                       if m.event.audit_days and m.event.imported)
        self._firsts = [first for first, _, _ in spans]
        self._spans = spans

    def __bool__(self) -> bool:
        return bool(self._spans)

    def of(self, position: int) -> Marker | None:
        i = bisect_right(self._firsts, position) - 1
        if i < 0:
            return None
        _, last, marker = self._spans[i]
        return marker if position <= last else None
