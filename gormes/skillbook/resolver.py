"""The resolver: which skill answers a phrase, with a score and the reasons.

Pure: skills and a phrase in, a `Route` out. A skill is considered only when its
status lets it be served (proven or promoted; candidates too when the caller asks
for them; disabled never). A matching exclusion rules a skill out whatever its
triggers say. The highest score wins; skills tied at the top are all chosen and
the route is `ambiguous` (the validator's conflict check exists to keep that
from happening).

`prompt_skills` is the only way a skill reaches a model's prompt on its own, and
it never lets a candidate or a disabled skill through.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from gormes.skillbook.matching import matches, weight, words
from gormes.skillbook.model import SERVED, Skill

# Each trigger matched after the heaviest adds this much: enough to break ties
# between equally specific skills, never enough to outweigh one more word.
EXTRA_TRIGGER_BONUS = 0.1
MAX_EXTRA_TRIGGERS = 9


class Match(msgspec.Struct, frozen=True, kw_only=True):
    skill: str
    status: str
    score: float
    triggers: list[str]  # the triggers that matched, heaviest first
    why: str


class RuledOut(msgspec.Struct, frozen=True, kw_only=True):
    skill: str
    exclusion: str
    why: str


class Route(msgspec.Struct, frozen=True, kw_only=True):
    phrase: str
    chosen: list[Match]  # empty: no skill answers this phrase
    others: list[Match]  # matched, but scored lower
    ruled_out: list[RuledOut]
    ambiguous: bool
    candidates_included: bool

    @property
    def choice(self) -> str | None:
        """The one skill chosen, or None when none or several were."""
        return self.chosen[0].skill if len(self.chosen) == 1 else None


def routable(skill: Skill, include_candidates: bool) -> bool:
    if skill.status in SERVED:
        return True
    return include_candidates and skill.status == "candidate"


def score_skill(skill: Skill, phrase: str, phrase_words: frozenset[str]) -> Match | None:
    hits = sorted(
        (t for t in skill.triggers if matches(t, phrase, phrase_words)),
        key=lambda t: (-weight(t), t),
    )
    if not hits:
        return None
    best = weight(hits[0])
    score = best + EXTRA_TRIGGER_BONUS * min(len(hits) - 1, MAX_EXTRA_TRIGGERS)
    why = f"trigger {hits[0]!r} matched ({best} word{'s' if best != 1 else ''})"
    if len(hits) > 1:
        why += f", and {len(hits) - 1} more: " + ", ".join(repr(t) for t in hits[1:])
    return Match(skill=skill.name, status=skill.status, score=round(score, 3), triggers=hits, why=why)


def excluded_by(skill: Skill, phrase: str, phrase_words: frozenset[str]) -> str | None:
    for exclusion in skill.exclusions:
        if matches(exclusion, phrase, phrase_words):
            return exclusion
    return None


def route(skills: Iterable[Skill], phrase: str, *, include_candidates: bool = False) -> Route:
    phrase_words = words(phrase)
    found: list[Match] = []
    ruled_out: list[RuledOut] = []
    for skill in sorted(skills, key=lambda s: s.name):
        if not routable(skill, include_candidates):
            continue
        exclusion = excluded_by(skill, phrase, phrase_words)
        if exclusion is not None:
            if any(matches(t, phrase, phrase_words) for t in skill.triggers):
                ruled_out.append(RuledOut(
                    skill=skill.name, exclusion=exclusion,
                    why=f"exclusion {exclusion!r} ruled {skill.name} out",
                ))
            continue
        match = score_skill(skill, phrase, phrase_words)
        if match is not None:
            found.append(match)
    found.sort(key=lambda m: (-m.score, m.skill))
    top = found[0].score if found else None
    chosen = [m for m in found if m.score == top]
    return Route(
        phrase=phrase, chosen=chosen, others=[m for m in found if m.score != top],
        ruled_out=ruled_out, ambiguous=len(chosen) > 1, candidates_included=include_candidates,
    )


def visible_skills(
    skills: Iterable[Skill], include_candidates: bool = False, *, include_manual: bool = False
) -> list[Skill]:
    """What may be shown to whoever asks: never disabled skills, candidates only on
    request, and a skill that opted out of model invocation only with `include_manual`
    (the operator, never a model)."""
    return sorted(
        (
            s for s in skills
            if routable(s, include_candidates) and (include_manual or not s.meta.disable_model_invocation)
        ),
        key=lambda s: s.name,
    )


def prompt_skills(skills: Sequence[Skill], chosen: Sequence[str]) -> list[Skill]:
    """The chosen skills that may be injected into a model prompt unasked: proven
    or promoted, and not opted out of model invocation. Nothing else, ever."""
    wanted = set(chosen)
    return [s for s in visible_skills(skills, include_candidates=False) if s.name in wanted]
