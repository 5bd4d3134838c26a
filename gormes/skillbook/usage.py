"""Recording skill use: a selection tied to the run that used it, and a person's
feedback on it. Both are events on the skill's stream; the `skill_usage`
projection (gormes/projections/skill_usage.py) joins them with the run's outcome.
A recording is one transaction; `seal(tx)`, given, is written in it too (an
operation call's audit record, `OperationContext.seal_into`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from gormes.events.runs import run_stream
from gormes.events.store import AppendRequest
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
    from gormes.events.audit_seal import Seal
    from gormes.events.store import AppendResult, EventStore, Transaction


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


async def record_selections(
    store: EventStore, run_id: str, matches: list[Match], phrase: str | None, *, seal: Seal | None = None,
) -> list[int]:
    """Append one `skill.selected` per match (each on its skill's stream), all or
    none; their positions."""
    requests = [AppendRequest(skill_stream(m.skill), [selection_event(run_id, m, phrase)]) for m in matches]
    return [a.last_position for a in await _recorded(store, requests, seal)]


async def record_feedback(
    store: EventStore, run_id: str, skill: str, verdict: FeedbackVerdict, note: str = "", *, seal: Seal | None = None,
) -> int:
    await require_run(store, run_id)
    event = SkillFeedback(run_id=run_id, skill=skill, verdict=verdict, note=note)
    [appended] = await _recorded(store, [AppendRequest(skill_stream(skill), [event])], seal)
    return appended.last_position


async def _recorded(store: EventStore, requests: list[AppendRequest], seal: Seal | None) -> list[AppendResult]:
    if seal is None:
        return await store.append_many(requests)

    def write(tx: Transaction) -> list[AppendResult]:
        appended = tx.append_many(requests)
        seal(tx)
        return appended

    return await store.transact(write)


async def read_usage(store: EventStore, skill: str | None = None) -> list[UsageRow]:
    """The `skill_usage` rows, brought up to date with the log first."""
    await ProjectionRunner(store, skill_usage).catch_up()
    columns = ", ".join(UsageRow.__struct_fields__)
    sql = f"SELECT {columns} FROM {TABLE}" + (" WHERE skill = ?" if skill else "") + " ORDER BY position"
    params = (skill,) if skill else ()

    rows = await store.read_sql(lambda conn: conn.execute(sql, params).fetchall())
    return [UsageRow(**dict(zip(UsageRow.__struct_fields__, row))) for row in rows]
