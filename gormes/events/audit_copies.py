"""Where an import puts the audit records a file brings (decision 0091).

A day stream `audit-<day>` holds one hash chain, whose digests name the stream
and each record's version (gormes/events/audit_chain.py). An export's records of a
day keep their versions and digests only where they continue the chain they were
sealed in. So each day a file holds is placed once, at its first line there:

- on its own stream, when the record follows there: the stream is at the line's
  version - 1 and the record's `prev` is the digest of the record before it
  (GENESIS on a day this log has no record of: a restore into a fresh database);
- on its own stream too when the record is there already (the same record at
  that version): the import is refused by its version ("already imported?"), as
  every stream's is, unless versions are ignored;
- otherwise this log holds another chain of that day (a refused import's record,
  an operation run before the import), and the file's day goes onto the first
  copy `audit-<day>~1`, `~2`... where it follows, a copy being checked as its day
  is. `gormes audit verify` reads a copy's digests as its day's (`day_stream`).

The file's later lines of the day go where its first went. A line with no
version, or no audit record, stays on its stream.

    placement = AuditPlacement(tx, check_versions=True)
    stream = placement.stream_for(line.stream, line.event, line.version)
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from itertools import count
from typing import Any

from gormes.events.audit import AUDIT_STREAM_PREFIX, COPY_MARK, OperationAudited, day_stream
from gormes.events.audit_chain import GENESIS


class Fit(Enum):
    FOLLOWS = "follows"  # the record continues the stream's chain at its version
    HERE = "here"  # the stream holds this very record at its version
    NEW = "new"  # an empty stream where the record cannot start (nor on any copy after it)
    OTHER = "other"  # the stream holds another chain at that version


def fit(version_here: int, before: Any, at: Any, event: OperationAudited, version: int) -> Fit:
    """How a record sealed at `version` fits a stream at `version_here`, whose
    records at `version - 1` and `version` are `before` and `at` (None if absent).
    Pure: the caller reads them."""
    if version_here == version - 1:
        head = GENESIS if before is None else getattr(before, "digest", None) or GENESIS
        if event.prev in (None, head):
            return Fit.FOLLOWS
    if version_here == 0:
        return Fit.NEW
    if version_here >= version and at == event:
        return Fit.HERE
    return Fit.OTHER


class AuditPlacement:
    """The stream each audit day of one import goes to, chosen at its first line."""

    def __init__(self, tx: Any, *, check_versions: bool) -> None:
        self.tx = tx
        self.check_versions = check_versions
        self.targets: dict[str, str] = {}

    def stream_for(self, stream: str, event: Any, version: int | None) -> str:
        if version is None or not isinstance(event, OperationAudited) or not stream.startswith(AUDIT_STREAM_PREFIX):
            return stream
        target = self.targets.get(stream)
        if target is None:
            target = self.targets[stream] = self._place(stream, event, version)
        return target

    def _place(self, stream: str, event: OperationAudited, version: int) -> str:
        for candidate in _candidates(stream):
            found = self._fit(candidate, event, version)
            if found is Fit.FOLLOWS or (found is Fit.HERE and self.check_versions):
                return candidate
            if found is Fit.NEW:
                break  # no copy further on holds the day's start either
        return stream  # appended there as before: refused by its version when checked

    def _fit(self, stream: str, event: OperationAudited, version: int) -> Fit:
        version_here = self.tx.stream_version(stream)
        if version_here == 0 or version_here < version - 1:
            return fit(version_here, None, None, event, version)
        records = self.tx.read_stream(stream, after_version=max(version - 2, 0))
        by_version = {r.version: r.event for r in records if r.version in (version - 1, version)}
        return fit(version_here, by_version.get(version - 1), by_version.get(version), event, version)


def _candidates(stream: str) -> Iterator[str]:
    """The stream itself, then its day's copies in order (a copy's own name skipped)."""
    yield stream
    day = day_stream(stream)
    for k in count(1):
        copy = f"{day}{COPY_MARK}{k}"
        if copy != stream:
            yield copy
