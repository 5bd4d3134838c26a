"""Skill events, on the skill's own stream `skill-<name>`.

A selection names the run that used the skill (`run_id`) rather than living on
the run's stream: `run-<id>` belongs to the run's actor and is what replay walks,
so nothing else writes observations into it. The `skill_usage` projection joins
the two: each selection gets its run's outcome and any feedback given on it.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from gormes.events.base import Event

FeedbackVerdict = Literal["good", "bad"]


def skill_stream(name: str) -> str:
    return f"skill-{name}"


class EvidenceNote(msgspec.Struct, frozen=True, kw_only=True):
    """A copy of one evidence entry of the skill's front matter, as it stood."""

    date: str  # ISO date
    type: str
    ref: str
    note: str = ""


class SkillSelected(Event, tag="skill.selected", kw_only=True):
    """The resolver (or an agent reading a skill) chose `skill` for run `run_id`."""

    run_id: str
    skill: str
    score: float
    why: str
    status: str = ""  # the skill's status when it was chosen
    phrase: str | None = None  # what was routed, when the choice came from routing


class SkillPromoted(Event, tag="skill.promoted", kw_only=True):
    """`gormes skills promote` moved a skill up because its evidence held."""

    skill: str
    from_status: str = msgspec.field(name="from")
    to: str
    evidence: tuple[EvidenceNote, ...] = ()


class SkillFeedback(Event, tag="skill.feedback", kw_only=True):
    """A person's verdict on how a skill served one run."""

    run_id: str
    skill: str
    verdict: FeedbackVerdict
    note: str = ""


SkillEvent = SkillSelected | SkillPromoted | SkillFeedback
