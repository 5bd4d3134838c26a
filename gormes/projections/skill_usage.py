"""The `skill_usage` projection: every skill selection, with the outcome of the
run that used it and any feedback a person gave on it.

    skill_usage(position, skill, run_id, score, why, status, phrase, selected_at,
                outcome, feedback, feedback_note)
    skill_run_outcomes(run_id, outcome)

`outcome` is `running` until the run ends, then `completed`, `failed` or
`cancelled`. Run outcomes are kept in their own small table so that a selection
recorded after its run ended still gets the outcome, whatever the order.
Times are the events' `recorded_at`, so a rebuild gives the same rows.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from gormes.events.base import Recorded
from gormes.events.runs import RunCancelled, RunCompleted, RunFailed
from gormes.events.skills import SkillFeedback, SkillSelected

from gormes.projections.schema import Index, Schema, Table, replace_sql

if TYPE_CHECKING:
    import sqlite_utils

TABLE = "skill_usage"
OUTCOMES = "skill_run_outcomes"

_OUTCOME_OF = {RunCompleted: "completed", RunFailed: "failed", RunCancelled: "cancelled"}


_USAGE_COLUMNS = {
    "position": int, "skill": str, "run_id": str, "score": float, "why": str,
    "status": str, "phrase": str, "selected_at": float, "outcome": str,
    "feedback": str, "feedback_note": str,
}
SCHEMA = Schema(
    tables=(
        Table(
            TABLE, _USAGE_COLUMNS, "position",
            frozenset({"skill", "run_id", "outcome", "selected_at"}),
        ),
        Table(OUTCOMES, {"run_id": str, "outcome": str}, "run_id"),
    ),
    indexes=(Index(TABLE, ("skill",)), Index(TABLE, ("run_id",))),
)

# INSERT OR REPLACE, in the SQL both databases share (every column replaced).
_SELECTED = replace_sql(TABLE, tuple(_USAGE_COLUMNS), "position", "?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL")
_OUTCOME = replace_sql(OUTCOMES, ("run_id", "outcome"), "run_id", "?, ?")


class SkillUsageProjection:
    name = "skill_usage"
    version = 1
    tables = (TABLE, OUTCOMES)
    types = ("skill.*", "run.completed", "run.failed", "run.cancelled")
    schema = SCHEMA

    def setup(self, db: sqlite_utils.Database) -> None:
        SCHEMA.create_sqlite(db)

    def apply(self, conn: sqlite3.Connection, records: list[Recorded]) -> None:
        for r in records:
            e = r.event
            if isinstance(e, SkillSelected):
                row = conn.execute(f"SELECT outcome FROM {OUTCOMES} WHERE run_id = ?", (e.run_id,)).fetchone()
                conn.execute(
                    _SELECTED,
                    (r.position, e.skill, e.run_id, e.score, e.why, e.status, e.phrase, r.recorded_at,
                     row[0] if row else "running"),
                )
            elif isinstance(e, SkillFeedback):
                conn.execute(
                    f"UPDATE {TABLE} SET feedback = ?, feedback_note = ? WHERE run_id = ? AND skill = ?",
                    (e.verdict, e.note, e.run_id, e.skill),
                )
            elif type(e) in _OUTCOME_OF and r.stream.startswith("run-"):
                run_id, outcome = r.stream[4:], _OUTCOME_OF[type(e)]
                conn.execute(_OUTCOME, (run_id, outcome))
                conn.execute(f"UPDATE {TABLE} SET outcome = ? WHERE run_id = ?", (outcome, run_id))


skill_usage = SkillUsageProjection()
