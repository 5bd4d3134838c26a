"""Promotion: a skill moves one step up the ladder (candidate -> proven ->
promoted) only when its evidence holds, and the move is recorded twice: as a
`skill.promoted` event and in the SKILL.md front matter (body kept byte for byte;
YAML comments in the front matter are not kept).

Its evidence is the front matter's entries plus the runs recorded as served well
(`skill.feedback` good, the latest verdict per run); those are written into the
new front matter, so the file alone still justifies its status.

The event comes first, and the file is renamed into place only once it is
durable. The call's audit record (`seal`, skills.promote's) is sealed with the
event, so a process killed before the rename leaves the event and its record,
and the file as it was: promoting again rewrites it (and records the promotion
again).
"""

from __future__ import annotations

import datetime
import os
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import yaml

from gormes.events.base import Recorded
from gormes.events.runs import run_stream
from gormes.events.skills import EvidenceNote, SkillFeedback, SkillPromoted, skill_stream
from gormes.skillbook.errors import PromotionRefused, UnknownSkill
from gormes.skillbook.loader import load_skills
from gormes.skillbook.model import LADDER, Evidence, FrontMatter, Skill
from gormes.skillbook.validator import check, status_problem

if TYPE_CHECKING:
    from gormes.events.audit_seal import Seal
    from gormes.events.store import AppendResult, EventStore, Transaction


class PromotionPlan(msgspec.Struct, frozen=True, kw_only=True):
    skill: str
    from_status: str
    to_status: str
    meta: FrontMatter  # the front matter to write
    text: str  # the whole new SKILL.md


class PromotionResult(msgspec.Struct, frozen=True, kw_only=True):
    skill: str
    from_status: str
    to_status: str
    file: str
    position: int  # of the skill.promoted event


def next_status(status: str) -> str:
    if status == "disabled":
        raise PromotionRefused("a disabled skill is not promoted; set its status by hand first")
    if status == LADDER[-1]:
        raise PromotionRefused(f"already {status}: there is no higher status")
    return LADDER[LADDER.index(status) + 1]


def plan_promotion(skill: Skill, skills: Sequence[Skill], today: datetime.date) -> PromotionPlan:
    """The promotion of `skill` one step up, or `PromotionRefused` saying why not."""
    by_name = {s.name: s for s in skills}
    target = next_status(skill.status)
    problem = status_problem(skill, target, by_name)
    if problem is not None:
        raise PromotionRefused(f"{skill.name} stays {skill.status}: {problem}")
    kinds = Counter(e.type for e in skill.meta.evidence)
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    meta = msgspec.structs.replace(
        skill.meta, status=target,
        status_evidence=(
            f"{target} since {today.isoformat()} (gormes skills promote, from {skill.status}): "
            f"{len(skill.meta.evidence)} evidence entries ({summary})."
        ),
    )
    return PromotionPlan(
        skill=skill.name, from_status=skill.status, to_status=target, meta=meta,
        text=render_skill(meta, skill.body),
    )


def render_skill(meta: FrontMatter, body: str) -> str:
    data: dict[str, Any] = msgspec.to_builtins(meta, builtin_types=(datetime.date,))
    front = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100, default_flow_style=False)
    return f"---\n{front}---\n{body}"


def feedback_evidence(skill: Skill, records: Sequence[Recorded]) -> list[Evidence]:
    """The runs a person said the skill served well (`gormes skills feedback RUN
    SKILL good`), as evidence entries of type `run`: one per run, its latest
    verdict counting (a later `bad` takes a `good` back), skipping runs the front
    matter already cites."""
    latest: dict[str, tuple[SkillFeedback, float]] = {}
    for record in records:
        if isinstance(record.event, SkillFeedback) and record.event.skill == skill.name:
            latest[record.event.run_id] = (record.event, record.recorded_at)
    cited = {e.ref.strip() for e in skill.meta.evidence}
    found = []
    for run_id, (event, at) in latest.items():
        if event.verdict != "good" or cited & {run_id, run_stream(run_id)}:
            continue
        day = datetime.datetime.fromtimestamp(at, tz=datetime.timezone.utc).date()
        note = "feedback good" + (f": {event.note}" if event.note else "")
        found.append(Evidence(date=day, type="run", ref=run_id, note=note))
    return found


def with_feedback(skill: Skill, records: Sequence[Recorded]) -> Skill:
    """`skill` with its recorded good feedback added to its front matter's evidence."""
    extra = feedback_evidence(skill, records)
    if not extra:
        return skill
    meta = msgspec.structs.replace(skill.meta, evidence=[*skill.meta.evidence, *extra])
    return msgspec.structs.replace(skill, meta=meta)


def evidence_notes(meta: FrontMatter) -> tuple[EvidenceNote, ...]:
    return tuple(
        EvidenceNote(date=e.date.isoformat(), type=e.type, ref=e.ref, note=e.note) for e in meta.evidence
    )


async def promote(
    root: Path, name: str, store: EventStore, today: datetime.date, *, seal: Seal | None = None,
) -> PromotionResult:
    """Check the skills, plan the promotion, then write the file and the event.

    The new file is written beside the old one first and renamed over it only once
    the event is durable, so a failed append leaves the file as it was. `seal(tx)`:
    also written in the event's transaction (an operation call's audit record,
    `OperationContext.seal_into`).
    """
    loaded = load_skills(root)
    skill = next((s for s in loaded.skills if s.name == name), None)
    if skill is None:
        broken = [i for i in loaded.issues if Path(i.file).parent.name == name]
        if broken:
            raise PromotionRefused(f"{name} cannot be promoted: {broken[0].line()}")
        raise UnknownSkill(f"no skill named {name!r} in {root}")
    report = check(loaded.skills, today=today)
    mine = [i for i in report.errors if i.file == skill.file and i.rule != "status"]
    if mine:
        raise PromotionRefused(f"{name} cannot be promoted while it fails its checks: {mine[0].line()}")
    skill = with_feedback(skill, await store.read_stream(skill_stream(name)))
    plan = plan_promotion(skill, loaded.skills, today)
    staged = _stage(skill.path, plan.text)
    try:
        event = SkillPromoted(
            skill=name, from_status=plan.from_status, to=plan.to_status, evidence=evidence_notes(skill.meta),
        )
        appended = await _appended(store, skill_stream(name), event, seal)
        os.replace(staged, skill.path)
    finally:
        if staged.exists():
            staged.unlink()
    return PromotionResult(
        skill=name, from_status=plan.from_status, to_status=plan.to_status, file=skill.file,
        position=appended.last_position,
    )


async def _appended(store: EventStore, stream: str, event: SkillPromoted, seal: Seal | None) -> AppendResult:
    if seal is None:
        return await store.append(stream, [event])

    def write(tx: Transaction) -> AppendResult:
        appended = tx.append(stream, [event])
        seal(tx)
        return appended

    return await store.transact(write)


def _stage(path: Path, text: str) -> Path:
    fd, name = tempfile.mkstemp(prefix=".SKILL.", suffix=".md", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(name, path.stat().st_mode & 0o777)
    return Path(name)
