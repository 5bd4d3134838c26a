"""One run's events (optionally with its subagents' runs) as JSON lines.

The lines have exactly the shape `gormes export` writes (gormes.events.jsonl), so
`gormes import` takes them and `gormes replay --file` replays them with no
database. The run's stream is `run-<id>`; with `children`, every run named by a
`run.child_spawned` in it is added, recursively, and all lines are written in
log position order.

Rows are copied as stored (never decoded and re-encoded), so an export holds the
recording byte for byte. `log` is an `SQLiteLog`, or on PostgreSQL the
`PostgresLog` a store's `read_with` hands over (`select` runs its SQL through
`log.sql` there).
"""

from __future__ import annotations

from typing import IO

import msgspec

from gormes.errors import UserError
from gormes.events.base import Recorded
from gormes.events.jsonl import select, stored_json, to_line
from gormes.events.sqlite_log import SQLiteLog

CHILD_SPAWNED = "run.child_spawned"


class UnknownRun(UserError):
    """No run with that id is in the log (or in the file)."""


class _ChildId(msgspec.Struct):
    child_run_id: str


_child_decoder = msgspec.json.Decoder(_ChildId)


def run_stream_name(run_id: str) -> str:
    return f"run-{run_id}"


def child_run_ids(records: list[Recorded]) -> list[str]:
    """The runs a run spawned, in the order it spawned them."""
    ids = []
    for record in records:
        if record.type == CHILD_SPAWNED:
            try:
                ids.append(_child_decoder.decode(stored_json(record)).child_run_id)
            except msgspec.DecodeError:  # ValidationError included: not a child we can name
                continue
    return ids


def run_records(
    log: SQLiteLog, run_id: str, *, children: bool = False, upto: int | None = None
) -> list[Recorded]:
    """The run's events (and its descendants' with `children`), in position order.

    Raises `UnknownRun` when the run has no events.
    """
    if upto is None:
        upto = log.head()
    own = select(log, streams=[run_stream_name(run_id)], upto=upto)
    if not own:
        raise UnknownRun(f"no run {run_id!r} in the log (no events on stream {run_stream_name(run_id)!r})")
    records = list(own)
    if children:
        seen = {run_id}
        pending = child_run_ids(own)
        while pending:
            child = pending.pop(0)
            if child in seen:
                continue
            seen.add(child)
            rows = select(log, streams=[run_stream_name(child)], upto=upto)
            records.extend(rows)
            pending.extend(child_run_ids(rows))
        records.sort(key=lambda r: r.position)
    return records


def export_run(log: SQLiteLog, run_id: str, out: IO[bytes], *, children: bool = False) -> int:
    """Write the run's events as JSON lines; returns how many were written."""
    records = run_records(log, run_id, children=children)
    out.write(b"".join(to_line(r) for r in records))
    return len(records)
