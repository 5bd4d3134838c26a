"""The operator's skill commands: skills.promote, skills.feedback and skills.select.

Operator-only and never offered to models: promotion rewrites a SKILL.md and
moves the skill up the ladder that decides what models are offered; feedback and
selections are the evidence promotion is judged on. `gormes skills promote`,
`skills feedback` and `skills route --run` call these, audited like every other
operation (decision 0019). The skills agents read are served by skills.list and
skills.read (gormes/tools/skills.py).

A promotion writes only inside the skills directory: a skill whose folder or
SKILL.md is a symlink, or resolves outside the directory, is refused before
anything is written (the file is rewritten by a rename in its folder, so a
symlinked folder would otherwise have a file outside replaced).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Annotated, Literal

import msgspec
import trio

from gormes.ops.spec import OperationContext, OperationDenied, OperationSpec, OperationUnavailable
from gormes.skillbook import operator_skills_dir, skills_dir
from gormes.skillbook.errors import SkillsError, UnknownSkill
from gormes.skillbook.loader import SKILL_FILE, load_skills
from gormes.skillbook.model import Skill
from gormes.skillbook.promotion import PromotionResult, promote
from gormes.skillbook.resolver import Route, route
from gormes.skillbook.usage import record_feedback, record_selections, require_run

OPERATOR = frozenset({"operator"})

Name = Annotated[str, msgspec.Meta(min_length=1)]
SkillsDir = Annotated[str, msgspec.Meta(min_length=1, description="The skills directory (default: see skills.list).")]


class PromoteInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Move a skill one status up, only if its evidence holds."""

    name: Name
    skills_dir: SkillsDir | None = None


class FeedbackInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Say how a skill served a run."""

    run_id: Name
    skill: Name
    verdict: Literal["good", "bad"]
    note: Annotated[str, msgspec.Meta(description="What went well or badly.")] = ""
    skills_dir: SkillsDir | None = None


class FeedbackRecorded(msgspec.Struct, kw_only=True):
    run_id: str
    skill: str
    verdict: str
    position: int


class SelectInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Route a phrase to its skill and record the choice as a selection by a run."""

    run_id: Name
    phrase: Name
    include_candidates: bool = False
    skills_dir: SkillsDir | None = None


class Selected(msgspec.Struct, kw_only=True):
    route: Route
    positions: list[int]  # one skill.selected per chosen skill


def _root(ctx: OperationContext, explicit: str | None) -> Path:
    return skills_dir(explicit, workspace=ctx.workspace)


def _store(ctx: OperationContext):
    if ctx.store is None:
        raise OperationUnavailable("the skills operations need an event store")
    return ctx.store


def check_inside(root: Path, name: str) -> None:
    """Refuse a skill whose folder or SKILL.md is a symlink or lies outside `root`
    (one linked out is not even loaded: `load_skills` reports it and reads nothing)."""
    refused = OperationDenied(f"skill {name!r} is a symlink or lies outside {root}: it is not promoted")
    folder = root / name
    if folder.is_symlink() or (folder / SKILL_FILE).is_symlink():
        raise refused
    skill = next((s for s in load_skills(root).skills if s.name == name), None)
    if skill is None:
        return  # promote names the fault (unknown, or broken)
    path = Path(skill.path)
    if path.is_symlink() or path.parent.is_symlink() or not path.resolve().is_relative_to(root.resolve()):
        raise refused


async def skills_promote(ctx: OperationContext, value: PromoteInput) -> PromotionResult:
    root = _root(ctx, value.skills_dir)
    await trio.to_thread.run_sync(check_inside, root, value.name)
    today = datetime.date.fromtimestamp(ctx.clock())
    return await promote(root, value.name, _store(ctx), today, seal=ctx.seal_into)


def require_skill(root: Path, name: str) -> None:
    """Refuse a name no SKILL.md under `root` carries (a folder of that name whose
    SKILL.md does not load still counts: its feedback is about that skill)."""
    loaded = load_skills(root)
    if any(s.name == name for s in loaded.skills) or any(Path(i.file).parent.name == name for i in loaded.issues):
        return
    raise UnknownSkill(f"no skill named {name!r} in {root}")


async def skills_feedback(ctx: OperationContext, value: FeedbackInput) -> FeedbackRecorded:
    root = _root(ctx, value.skills_dir)
    # The skills `gormes skills list` shows: with no skills/ here, the shipped ones.
    root = root if root.is_dir() else operator_skills_dir(value.skills_dir)
    await trio.to_thread.run_sync(require_skill, root, value.skill)
    position = await record_feedback(_store(ctx), value.run_id, value.skill, value.verdict, value.note,
                                     seal=ctx.seal_into)
    return FeedbackRecorded(run_id=value.run_id, skill=value.skill, verdict=value.verdict, position=position)


def load_strict(root: Path) -> list[Skill]:
    """Every skill, or one clear error naming the first file that did not load."""
    loaded = load_skills(root)
    if loaded.issues:
        raise SkillsError(loaded.issues[0].line())
    return loaded.skills


async def skills_select(ctx: OperationContext, value: SelectInput) -> Selected:
    store = _store(ctx)
    skills = await trio.to_thread.run_sync(load_strict, _root(ctx, value.skills_dir))
    routed = route(skills, value.phrase, include_candidates=value.include_candidates)
    await require_run(store, value.run_id)
    positions = await record_selections(
        store, value.run_id, routed.chosen, routed.phrase, seal=ctx.seal_into,
    ) if routed.chosen else []
    return Selected(route=routed, positions=positions)


def _spec(name: str, description: str, handler, input_type: type, output_type: type) -> OperationSpec:
    return OperationSpec(
        name=name, description=description, input_type=input_type, output_type=output_type, handler=handler,
        trust=OPERATOR, audit_kind="skills.write", mutating=True, idempotent=False, timeout=30.0,
    )


SPECS = (
    _spec("skills.promote", "Move a skill one status up when its evidence holds; rewrites its front matter.",
          skills_promote, PromoteInput, PromotionResult),
    _spec("skills.feedback", "Record how a skill served a run (good or bad).", skills_feedback, FeedbackInput,
          FeedbackRecorded),
    _spec("skills.select", "Route a phrase and record the chosen skill as selected by a run.", skills_select,
          SelectInput, Selected),
)
