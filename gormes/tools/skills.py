"""skills.list and skills.read: the skills served to agents, prompt-visible.

Neither ever shows a disabled skill; candidates only when the caller asks
(`include_candidates`); a skill with `disable_model_invocation` only to the
operator. Reading a skill on behalf of a run records a `skill.selected` event
tied to that run. The skills are read from $GORMES_SKILLS_DIR, else `skills/`
in the workspace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import trio

from gormes.ops.spec import OperationContext, OperationSpec, OperationUnavailable
from gormes.skillbook import skills_dir
from gormes.skillbook.errors import SkillsDirMissing, UnknownSkill
from gormes.skillbook.loader import load_skills
from gormes.skillbook.model import Skill
from gormes.skillbook.resolver import Match, Route, route, visible_skills
from gormes.skillbook.usage import record_selections

EVERYONE = frozenset({"operator", "gateway", "child-agent", "system"})


class SkillsListInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """List the skills available to you; give `phrase` to ask which skill answers it."""

    phrase: Annotated[str, msgspec.Meta(min_length=1, description="A task, to route to its skill.")] | None = None
    include_candidates: Annotated[bool, msgspec.Meta(
        description="Also list candidate skills (not yet proven by evidence).")] = False


class SkillSummary(msgspec.Struct, kw_only=True):
    name: str
    description: str
    status: str
    triggers: list[str]
    required_skills: list[str]


class SkillsListOutput(msgspec.Struct, kw_only=True):
    skills: list[SkillSummary]
    route: Route | None = None  # when a phrase was given


class SkillsReadInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Read one skill's instructions (its SKILL.md body)."""

    name: Annotated[str, msgspec.Meta(min_length=1)]
    include_candidates: bool = False
    phrase: Annotated[str, msgspec.Meta(description="The task you read it for, if any.")] | None = None


class SkillsReadOutput(msgspec.Struct, kw_only=True):
    name: str
    description: str
    status: str
    required_skills: list[str]
    body: str
    selection_position: int | None = None  # the skill.selected event, when read for a run


def _load(ctx: OperationContext, root: Path | None, include_candidates: bool) -> list[Skill]:
    where = root or skills_dir(workspace=ctx.workspace)
    try:
        loaded = load_skills(where)
    except SkillsDirMissing as exc:
        raise OperationUnavailable(f"no skills here: {exc}") from None
    return visible_skills(loaded.skills, include_candidates, include_manual=ctx.caller.trust == "operator")


def _summary(skill: Skill) -> SkillSummary:
    return SkillSummary(
        name=skill.name, description=skill.meta.description, status=skill.status,
        triggers=list(skill.triggers), required_skills=list(skill.meta.required_skills),
    )


def skill_operations(root: Path | None = None) -> tuple[OperationSpec, ...]:
    """The two skill operations, reading skills from `root` (default: see module doc)."""

    async def skills_list(ctx: OperationContext, value: SkillsListInput) -> SkillsListOutput:
        skills = await trio.to_thread.run_sync(_load, ctx, root, value.include_candidates)
        routed = None if value.phrase is None else route(skills, value.phrase, include_candidates=value.include_candidates)
        return SkillsListOutput(skills=[_summary(s) for s in skills], route=routed)

    async def skills_read(ctx: OperationContext, value: SkillsReadInput) -> SkillsReadOutput:
        skills = await trio.to_thread.run_sync(_load, ctx, root, value.include_candidates)
        skill = next((s for s in skills if s.name == value.name), None)
        if skill is None:
            hint = "" if value.include_candidates else " (candidates are listed only with include_candidates)"
            raise UnknownSkill(f"no skill named {value.name!r} is available{hint}")
        position = None
        if ctx.caller.run_id is not None and ctx.store is not None:
            match = _match_for(skill, value.phrase)
            (position,) = await record_selections(ctx.store, ctx.caller.run_id, [match], value.phrase)
        return SkillsReadOutput(
            name=skill.name, description=skill.meta.description, status=skill.status,
            required_skills=list(skill.meta.required_skills), body=skill.body, selection_position=position,
        )

    return (
        OperationSpec(
            name="skills.list",
            description="List the skills you may use (name, description, triggers); with `phrase`, "
            "also which skill answers it, with a score and the reason.",
            input_type=SkillsListInput, output_type=SkillsListOutput, handler=skills_list,
            trust=EVERYONE, audit_kind="skills.read", prompt_visible=True, timeout=10.0,
        ),
        OperationSpec(
            name="skills.read",
            description="Read one skill's instructions by name. Reading it for a run records that "
            "the run selected it.",
            input_type=SkillsReadInput, output_type=SkillsReadOutput, handler=skills_read,
            trust=EVERYONE, audit_kind="skills.read", prompt_visible=True, timeout=10.0,
            idempotent=False,
        ),
    )


def _match_for(skill: Skill, phrase: str | None) -> Match:
    if phrase:
        routed = route([skill], phrase, include_candidates=True)
        if routed.chosen:
            return routed.chosen[0]
    return Match(skill=skill.name, status=skill.status, score=0.0, triggers=[], why="read by name through skills.read")


SPECS = skill_operations()
