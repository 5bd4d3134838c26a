"""Audit events: one per operation call, allowed or denied, from any entry point.

The executor (gormes/ops/executor.py) appends an `OperationAudited` for every
call to the day's stream `audit-<yyyy-mm-dd>` (UTC, from the executor's clock), so
a day of audit can be read, exported or pruned as one stream. It records who
called what and how it ended, never the input or the output themselves: the
input is kept as the sha256 of its canonical JSON (runs record tool results on
their own streams).

Each day's stream is a hash chain (gormes/events/audit_chain.py, decision 0018): a record
carries the digest of the record before it (`prev`) and its own (`digest`), so an
edited, deleted, moved or inserted record shows. Records written before the chain
have neither.

An operation whose change no log transaction covers (files written, a command run,
many transactions: `OperationSpec.write_ahead`, decision 0062) gets two records: a
`started` one, committed before its handler runs, then its outcome, which names
the first (`started_position`). A `started` record that no later record names is
a call whose process ended before its outcome was recorded (`gormes audit
unfinished`).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal

from gormes.events.base import Event

AUDIT_STREAM_PREFIX = "audit-"
COPY_MARK = "~"  # audit-2026-12-08~1: an imported copy of the day (decision 0091)

AuditOutcome = Literal["ok", "error", "denied", "invalid", "timeout", "cancelled", "started"]


DAY_MS = 86_400_000  # a UTC day in Unix time (which has no leap seconds)
_last_day: tuple[int, str] = (0, AUDIT_STREAM_PREFIX + "1970-01-01")  # (its first ms, its stream)


def audit_stream(at_ms: int) -> str:
    """The stream an audit event recorded at `at_ms` (ms since the epoch) goes to."""
    global _last_day
    start = at_ms - at_ms % DAY_MS
    if _last_day[0] != start:
        day = datetime.fromtimestamp(start / 1000, tz=timezone.utc).strftime("%Y-%m-%d")
        _last_day = (start, AUDIT_STREAM_PREFIX + day)
    return _last_day[1]


def day_stream(stream: str) -> str:
    """The day stream whose chain an audit stream holds: itself, or for a copy
    `audit-<day>~<k>`, `audit-<day>` (its records' digests name it)."""
    return stream.split(COPY_MARK, 1)[0] if stream.startswith(AUDIT_STREAM_PREFIX) else stream


class OperationAudited(Event, tag="audit.operation", kw_only=True, omit_defaults=True):
    """One operation call. `allowed` is whether the handler ran (the name was
    known, the trust class allowed and the input valid); `outcome` says how the
    call ended: ok, error (the handler raised), denied (refused before or by the
    handler), invalid (input did not validate), timeout or cancelled; or, for a
    write-ahead operation, started (the handler is about to run: the outcome
    follows in a record of its own, whose `started_position` is this one's).

    Stored without the fields that hold their default (decision 0067): a record
    of a call outside a run has no `run_id`, one before its outcome no
    `started_position`. Records stored before with them, as null, read the same,
    and the chain's digest leaves such fields out for both."""

    operation: str
    audit_kind: str | None  # None when the operation is unknown
    caller: str
    trust: str
    run_id: str | None = None
    job_id: str | None = None
    allowed: bool
    outcome: AuditOutcome
    error: str | None = None  # the error's class and first line, at most 300 characters
    duration_ms: float
    input_sha256: str | None = None
    mutating: bool = False
    at: int  # ms since the epoch, from the executor's clock
    started_position: int | None = None  # the log position of this call's `started` record
    prev: str | None = None  # the day's previous record's digest (GENESIS for the first)
    digest: str | None = None  # sha256 over prev, stream, version and this record
