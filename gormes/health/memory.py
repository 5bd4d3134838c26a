"""Memory checks: semantic recall, the extractor's backlog and graph age, and the
memory operations that failed.

- `memory.semantic`: semantic recall is optional (the gormes[semantic] extra).
  Off is acceptable, off and unseen is not: it warns, with the reason.
- `memory.extraction`: extraction is an operation (`memory.extract`), never
  automatic, so completed runs pile up until someone extracts them. The backlog
  is the completed runs that no memory event of provenance kind "extracted"
  cites (by its origin's run id); the message also says how long ago the graph
  last took an extracted observation.
- `memory.dead_letters`: extraction never runs as a job in this version, so
  there is no dead job to count. Its dead letters are the memory operations'
  calls that ended in `error` or `timeout` in the last 24 h (`audit.operation`).

Without the memory modules the checks say "not installed" (ok), unless the log
holds memory events this gormes cannot look after (warn).
"""

from __future__ import annotations

from gormes.events.audit import audit_stream
from gormes.events.sql_fragments import glob, json_number, json_text
from gormes.health import (
    Check,
    DoctorContext,
    Verdict,
    age,
    counted,
    listing,
    ok,
    warn,
)

MODULES = ("gormes.recall", "gormes.events.memory")
DEAD_LETTER_WINDOW_S = 24 * 3600.0
FAILED_OUTCOMES = ("error", "timeout")

def not_installed(ctx: DoctorContext) -> Verdict | None:
    """The verdict when memory is not (fully) installed; None when it is."""
    missing = [m for m in MODULES if not ctx.module_exists(m)]
    if not missing:
        return None
    if len(missing) < len(MODULES):
        return warn(f"memory is only partly installed: {', '.join(missing)} missing",
                    "reinstall gormes (a partial installation cannot recall or extract)")
    events = counted(ctx, "memory.*")
    if events:
        return warn(f"the log holds {events} memory event(s) but this gormes has no memory support",
                    "upgrade gormes to the version that wrote them")
    return ok("memory is not installed in this version (no memory module, no memory events)")


def check_semantic(ctx: DoctorContext) -> Verdict:
    if (absent := not_installed(ctx)) is not None:
        return absent
    # Imported once the module is known to be there: a gormes without it still checks the rest.
    from gormes.recall.semantic import SWITCH_ENV, semantic_status

    status = semantic_status()
    if status.enabled:
        return ok("semantic recall on")
    switched_off = SWITCH_ENV in status.reason
    return warn(
        f"semantic recall is off: {status.reason}; recall runs lexical and graph modes only",
        f"unset {SWITCH_ENV} where gormes runs" if switched_off
        else "pip install 'gormes[semantic]' where gormes runs",
    )


def extraction_age(ctx: DoctorContext) -> str:
    last = ctx.log.last_extracted
    return "no extraction yet" if last is None else f"graph last extracted {age(ctx.now - last)} ago"


def backlog(ctx: DoctorContext) -> tuple[int, str | None, float | None]:
    """(completed runs not extracted, the oldest one's run id, when it completed),
    from the doctor's log summary."""
    awaiting = ctx.log.awaiting
    if not awaiting:
        return 0, None, None
    run_id, completed_at = min(awaiting.items(), key=lambda item: (item[1], item[0]))
    return len(awaiting), run_id, completed_at


def check_extraction(ctx: DoctorContext) -> Verdict:
    if (absent := not_installed(ctx)) is not None:
        return absent
    waiting, oldest, completed_at = backlog(ctx)
    if not waiting:
        return ok(f"no completed run awaits extraction; {extraction_age(ctx)}")
    return warn(
        f"{waiting} completed run(s) not extracted into memory, the oldest ({oldest}) completed "
        f"{age(ctx.now - completed_at)} ago; {extraction_age(ctx)}",
        f"gormes ops call memory.extract '{{\"run_id\": \"{oldest}\", \"model\": \"openai:MODEL\"}}' "
        "for each run worth remembering",
    )


def check_dead_letters(ctx: DoctorContext) -> Verdict:
    if (absent := not_installed(ctx)) is not None:
        return absent
    since_ms = ctx.now_ms - int(DEAD_LETTER_WINDOW_S * 1000)
    conn = ctx.db
    # The audit days the window touches (a record's day stream is that of its `at`):
    # read by stream, so the check costs a day of audit, not the log.
    days = sorted({audit_stream(since_ms), audit_stream(ctx.now_ms)})
    rows = conn.execute(
        f"SELECT op, outcome, count(*) FROM (SELECT {json_text(conn, '$.operation')} AS op, "
        f"{json_text(conn, '$.outcome')} AS outcome, {json_number(conn, '$.at')} AS at "
        f"FROM events WHERE stream IN ({', '.join('?' * len(days))}) AND type = 'audit.operation') AS calls "
        f"WHERE {glob(conn, 'op', 'memory.*')} AND outcome IN (?, ?) AND at >= ? "
        "GROUP BY op, outcome ORDER BY op, outcome",
        (*days, *FAILED_OUTCOMES, since_ms),
    ).fetchall()
    if not rows:
        return ok("no memory operation failed in the last 24 h")
    total = sum(n for _, _, n in rows)
    return warn(
        f"{total} memory operation call(s) failed in the last 24 h: "
        + listing([f"{op} {outcome} x{n}" for op, outcome, n in rows]),
        "read the errors with `gormes audit export --since 24h --kind memory.write --kind memory.read`, "
        "fix the cause (often the model provider), then call the operation again",
    )


CHECKS = [
    Check(name="memory.semantic", category="memory", run=check_semantic),
    Check(name="memory.extraction", category="memory", run=check_extraction),
    Check(name="memory.dead_letters", category="memory", run=check_dead_letters),
]
