"""Recording skill use: a selection tied to the run that used it, and a person's
feedback on it. Both are events on the skill's stream; the `skill_usage`
projection (gormes/projections/skill_usage.py) joins them with the run's outcome.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from gormes.events.runs import run_stream
from gormes.events.skills import (
    FeedbackVerdict,
    SkillFeedback,
    SkillSelected,
    skill_stream,
)
from gormes.projections.runner import ProjectionRunner
from gormes.projections.skill_usage import TABLE, skill_usage
from gormes.skillbook.errors import SkillsError
from gormes.skillbook.resolver import Match

if TYPE_CHECKING:
    from gormes.events.store import EventStore


class UnknownRun(SkillsError):
    """A selection or feedback naming a run the log has never seen."""


class UsageRow(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    skill: str
    run_id: str
    score: float
    why: str
    status: str | None
    phrase: str | None
    selected_at: float
    outcome: str
    feedback: str | None
    feedback_note: str | None


async def require_run(store: EventStore, run_id: str) -> None:
    if not await store.read_stream(run_stream(run_id)):
        raise UnknownRun(f"no run {run_id!r} in this database")


def selection_event(run_id: str, match: Match, phrase: str | None) -> SkillSelected:
    return SkillSelected(
        run_id=run_id, skill=match.skill, score=match.score, why=match.why, status=match.status, phrase=phrase,
    )


async def record_selections(store: EventStore, run_id: str, matches: list[Match], phrase: str | None) -> list[int]:
    """Append one `skill.selected` per match (each on its skill's stream); their positions."""
    positions = []
    for match in matches:
        appended = await store.append(skill_stream(match.skill), [selection_event(run_id, match, phrase)])
        positions.append(appended.last_position)
    return positions


async def record_feedback(store: EventStore, run_id: str, skill: str, verdict: FeedbackVerdict, note: str = "") -> int:
    await require_run(store, run_id)
    appended = await store.append(
        skill_stream(skill), [SkillFeedback(run_id=run_id, skill=skill, verdict=verdict, note=note)]
    )
    return appended.last_position


async def read_usage(store: EventStore, skill: str | None = None) -> list[UsageRow]:
    """The `skill_usage` rows, brought up to date with the log first."""
    await ProjectionRunner(store, skill_usage).catch_up()
    columns = ", ".join(UsageRow.__struct_fields__)
    sql = f"SELECT {columns} FROM {TABLE}" + (" WHERE skill = ?" if skill else "") + " ORDER BY position"
    params = (skill,) if skill else ()

    rows = await store.read_sql(lambda conn: conn.execute(sql, params).fetchall())
    return [UsageRow(**dict(zip(UsageRow.__struct_fields__, row))) for row in rows]
