"""Replay check: runs whose recording cannot be replayed exactly, and why.

What replay needs (gormes/actors/runs/recorded.py): the stream begins with
`run.started`, every event is of a type this gormes reads, observations carry
`seq` 1..n with no gap or repeat, and the recorded handler is registered here.
Each is one aggregate query over the `run-*` streams, so no run is decoded.
"""

from __future__ import annotations

from gormes.events.runs import OBSERVATION_TYPES
from gormes.events.sql_fragments import glob, json_number, json_text
from gormes.health import Check, DoctorContext, Verdict, listing, ok, warn

_OBSERVATION_TAGS = tuple(cls.__struct_config__.tag for cls in OBSERVATION_TYPES)


def unreplayable_runs(ctx: DoctorContext) -> dict[str, list[str]]:
    """Run id -> the reasons it cannot be replayed exactly."""
    conn, why = ctx.db, {}
    runs = glob(conn, "stream", "run-*")
    seq = json_number(conn, "$.seq")

    def note(stream: str, reason: str) -> None:
        why.setdefault(stream.removeprefix("run-"), []).append(reason)

    for stream, type_ in conn.execute(f"SELECT stream, type FROM events WHERE {runs} AND version = 1"):
        if type_ != "run.started":
            note(stream, f"begins with {type_}, not run.started")
    for stream, type_, type_version, n in conn.execute(
        f"SELECT stream, type, type_version, count(*) FROM events WHERE {runs} "
        "GROUP BY stream, type, type_version"
    ):
        cls = ctx.codec.class_for(type_)
        if cls is None or type_version > cls.schema_version:
            note(stream, f"{n} event(s) of type {type_} v{type_version} this gormes cannot read")
    marks = ",".join("?" * len(_OBSERVATION_TAGS))
    for stream, n, distinct, top in conn.execute(
        f"SELECT stream, count(*), count(DISTINCT {seq}), "
        f"max({seq}) FROM events WHERE {runs} AND type IN ({marks}) "
        "GROUP BY stream", _OBSERVATION_TAGS,
    ):
        if distinct != n or top != n:
            note(stream, f"observation seq has gaps or repeats ({n} observations, highest seq {top})")
    for stream, handler in conn.execute(
        f"SELECT stream, {json_text(conn, '$.handler')} FROM events WHERE {runs} "
        "AND type = 'run.started'"
    ):
        if handler not in ctx.run_handlers:
            note(stream, f"its handler {handler!r} is not registered here")
    return why


def check_runs(ctx: DoctorContext) -> Verdict:
    why = unreplayable_runs(ctx)
    if not why:
        runs = ctx.db.execute("SELECT count(*) FROM events WHERE type = 'run.started'").fetchone()[0]
        return ok(f"{runs} recorded run(s), each replayable from the log")
    described = [f"{run_id}: {'; '.join(reasons)}" for run_id, reasons in sorted(why.items())]
    return warn(
        f"{len(why)} run(s) cannot be replayed exactly: {listing(described, 3)}",
        "a missing handler: pass --import MODULE that registers it; missing or unreadable "
        "events: the recording is incomplete (restore the log) or needs a newer gormes",
    )


CHECKS = [Check(name="replay.runs", category="replay", run=check_runs)]
