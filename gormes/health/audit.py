"""Audit checks: every day's audit hash chain is intact (gormes/events/audit_chain.py),
and every write-ahead call of the last days has its outcome (gormes/audit_unfinished.py).

An edited, deleted, moved or inserted audit record is a failure naming the day and
position. Days before the last one the previous doctor run saw were verified then
and take no new records (a record goes to its own day), so only that day and the
ones after it are walked again (gormes/health/scan.py); `--full` walks every day,
and so does a run after an import that brought records to an earlier day.
A day holding records brought by `gormes import` is a warning naming the import
(decision 0087): its chain verifies as the file made it.
"""

from __future__ import annotations

import json

from gormes.audit_unfinished import find_open_calls, index_hint, maybe_running, scan_note
from gormes.events.audit import AUDIT_STREAM_PREFIX, DAY_MS
from gormes.events.audit_chain import DayChain, verify_chains
from gormes.events.imports import Marker, read_imports
from gormes.health import Check, DoctorContext, Verdict, fail, listing, ok, warn
from gormes.health.scan import LogSummary

UNFINISHED_DAYS = 7  # how far back the doctor looks (an older call killed stays listed by `gormes audit unfinished`)


def check_chain(ctx: DoctorContext) -> Verdict:
    summary = ctx.log
    markers = read_imports(ctx.db, ctx.codec)  # one row per import
    if ctx.full or summary.audit_day is None or _brought_before(markers, summary):
        summary.audit_day, summary.audit_days_before, summary.audit_sealed_before = None, 0, 0
        summary.audit_broken_before, summary.audit_imported_before = [], []
    days = verify_chains(ctx.db, ctx.codec, since_day=summary.audit_day, markers=markers)
    described = list(summary.audit_broken_before) + [_described(d) for d in days if d.first_break is not None]
    imported = list(summary.audit_imported_before) + [_imported(d) for d in days if d.origin != "here"]
    count = summary.audit_days_before + len(days)
    sealed = summary.audit_sealed_before + sum(d.sealed for d in days)
    summary.audit_imports_seen = max((m.position for m in markers), default=0)
    if days:
        closed = days[:-1]
        summary.audit_day = days[-1].day
        summary.audit_days_before += len(closed)
        summary.audit_sealed_before += sum(d.sealed for d in closed)
        summary.audit_broken_before += [_described(d) for d in closed if d.first_break is not None]
        summary.audit_imported_before += [_imported(d) for d in closed if d.origin != "here"]
    if described:
        return fail(
            f"audit chain broken on {len(described)} day(s): {listing(described, 3)}",
            "someone or something changed the audit trail: run `gormes audit verify` for every break, "
            "compare with your anchored heads and a backup, and keep the database as evidence",
        )
    if imported:
        return warn(
            f"{count} audit day(s), {sealed} sealed record(s), every chain intact, but not all sealed here: "
            f"{len(imported)} day(s) hold records brought by `gormes import`: {listing(imported, 3)}",
            "an imported chain verifies as its file made it, forged or not: check each imported day's head "
            "against the heads anchored on the log it came from (`gormes audit verify` names the import, "
            "its file and sha256)",
        )
    return ok(f"{count} audit day(s), {sealed} sealed record(s), every chain intact, all sealed here")


def _brought_before(markers: list[Marker], summary: LogSummary) -> bool:
    """An import since the last run brought records to a day walked before it."""
    return any(m.position > summary.audit_imports_seen and summary.audit_day is not None
               and any(d.stream.removeprefix(AUDIT_STREAM_PREFIX) < summary.audit_day for d in m.event.audit_days)
               for m in markers)


def _described(d: DayChain) -> str:
    return f"{d.day} at position {d.first_break.position}: {d.first_break.reason}"  # type: ignore[union-attr]


def _imported(d: DayChain) -> str:
    by = ", ".join(f"{i.records} by the import at position {i.position} (file {json.dumps(i.name)})"
                   for i in d.imports)
    text = f"{d.day}: {d.origin}, {d.here} sealed here, {by}"
    if d.onto_import is not None:
        text += f", sealed here onto an imported record from position {d.onto_import.position}"
    return text


def check_unfinished(ctx: DoctorContext) -> Verdict:
    since = ctx.now_ms - UNFINISHED_DAYS * DAY_MS
    timeouts = {spec.name: spec.timeout for spec in ctx.operations}
    found = find_open_calls(ctx.db, ctx.codec, since)
    stale = [r for r in found.calls if not maybe_running(r, timeouts, ctx.now_ms)]
    note = scan_note(found)
    if stale:
        return warn(
            f"{len(stale)} call(s) started with no outcome recorded: "
            + listing([f"{r.operation} at {r.time} (position {r.position})" for r in stale], 3)
            + ("" if note is None else f"; {note}"),
            "their process ended mid-call (killed, crashed, or by the command it ran): the effect may have "
            "happened unrecorded; check each (the file written, the command run) and `gormes audit unfinished`"
            + ("" if note is None else f"; the open calls' index: {index_hint(found.index)}"),
        )
    recorded = f"every write-ahead call of the last {UNFINISHED_DAYS} days has its outcome recorded"
    if note is None:
        return ok(recorded)
    if not found.scanned:  # nothing the index would have held: a log with no write-ahead call of late
        return ok(f"{recorded} ({note}; {index_hint(found.index)})")
    # degraded, not wrong: each read of the open calls costs a pass over the log's write-ahead records
    return warn(f"{recorded}, but {note}", index_hint(found.index))


CHECKS = [
    Check(name="audit.chain", category="audit", run=check_chain),
    Check(name="audit.unfinished", category="audit", run=check_unfinished),
]
