"""Replay check: runs whose recording cannot be replayed exactly, and why.

What replay needs (gormes/actors/runs/recorded.py): the stream begins with
`run.started`, every event is of a type this gormes reads, observations carry
`seq` 1..n with no gap or repeat, and the recorded handler is registered here.
The doctor's log summary (gormes/health/scan.py) has each of them, folded from
the events appended since its last run: no run is decoded.
"""

from __future__ import annotations

from gormes.health import Check, DoctorContext, Verdict, listing, ok, warn
from gormes.health.scan import seq_reasons, split_key


def _unread(counts: dict[str, int], ctx: DoctorContext) -> list[str]:
    reasons = []
    for key, n in sorted(counts.items()):
        type_, type_version = split_key(key)
        if not ctx.reads(type_, type_version):
            reasons.append(f"{n} event(s) of type {type_} v{type_version} this gormes cannot read")
    return reasons


def unreplayable_runs(ctx: DoctorContext) -> dict[str, list[str]]:
    """Run id -> the reasons it cannot be replayed exactly (from the log summary:
    the runs with no end yet, the ended runs whose recording was incomplete, and
    the runs of handlers not registered here)."""
    summary, why = ctx.log, {}

    def note(run_id: str, reasons: list[str]) -> None:
        if reasons:
            why.setdefault(run_id, []).extend(reasons)

    for run_id, mark in summary.open_runs.items():
        note(run_id, seq_reasons(mark) + _unread(mark.unread, ctx))
    for run_id, reasons in summary.unreplayable.items():
        note(run_id, reasons)
    for run_id, counts in summary.unread_runs.items():
        note(run_id, _unread(counts, ctx))
    for handler, runs in summary.handlers.items():
        if handler not in ctx.run_handlers:
            for run_id in runs.first:
                note(run_id, [f"its handler {handler!r} is not registered here"])
    return why


def _unregistered(ctx: DoctorContext, why: dict[str, list[str]]) -> int:
    """How many runs `why` does not list: the runs of unregistered handlers past
    the few the summary names."""
    return sum(
        runs.runs - len(runs.first) for handler, runs in ctx.log.handlers.items()
        if handler not in ctx.run_handlers
    )


def check_runs(ctx: DoctorContext) -> Verdict:
    why = unreplayable_runs(ctx)
    if not why:
        return ok(f"{ctx.log.started} recorded run(s), each replayable from the log")
    described = [f"{run_id}: {'; '.join(reasons)}" for run_id, reasons in sorted(why.items())]
    more = _unregistered(ctx, why)
    return warn(
        f"{len(why) + more} run(s) cannot be replayed exactly: {listing(described, 3)}"
        + (f" (and {more} more of the same handlers)" if more else ""),
        "a missing handler: pass --import MODULE that registers it; missing or unreadable "
        "events: the recording is incomplete (restore the log) or needs a newer gormes",
    )


CHECKS = [Check(name="replay.runs", category="replay", run=check_runs)]
