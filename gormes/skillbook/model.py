"""What a skill is: the typed front matter of a SKILL.md, its body, and the
problems the loader and the validator report.

    ---
    name: replay-forensics
    description: ...
    status: candidate            # candidate | proven | promoted | disabled
    triggers: [replay, fork a run]
    exclusions: [submit a job]
    required_skills: []
    disable_model_invocation: false
    evidence:
      - {date: 2025-01-31, type: run, ref: run-01J..., note: found the divergence}
    status_evidence: why the status is what it is, in a sentence or two
    ---
    markdown body

`triggers` and `exclusions` have no default on purpose: a skill must say what it
answers and what it must not (an empty `exclusions` list is a declaration too).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Annotated, Literal

import msgspec

Status = Literal["candidate", "proven", "promoted", "disabled"]
STATUSES: tuple[str, ...] = ("candidate", "proven", "promoted", "disabled")
# The order a skill climbs; `disabled` is off the ladder.
LADDER: tuple[str, ...] = ("candidate", "proven", "promoted")
# Statuses whose skills may be put in front of a model without being asked for.
SERVED: frozenset[str] = frozenset({"proven", "promoted"})

EvidenceType = Literal["run", "eval", "review", "test", "incident", "promotion"]
EVIDENCE_TYPES: tuple[str, ...] = ("run", "eval", "review", "test", "incident", "promotion")

PROVEN_MIN_EVIDENCE = 3

SkillName = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")]


class Evidence(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One place the skill proved itself (or, for `promotion`, the consumer that
    depends on it: `ref` is the name of a skill listing it in `required_skills`)."""

    date: datetime.date
    type: EvidenceType
    ref: str
    note: str = ""


class FrontMatter(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: SkillName
    description: str
    status: Status
    triggers: list[str] | None = None
    exclusions: list[str] | None = None
    required_skills: list[SkillName] = []
    disable_model_invocation: bool = False
    evidence: list[Evidence] = []
    status_evidence: str = ""


class Skill(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed SKILL.md: its front matter, its markdown body and where it lives."""

    meta: FrontMatter
    body: str
    path: Path
    file: str = ""  # how messages name the file (relative to the working directory)

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def status(self) -> str:
        return self.meta.status

    @property
    def triggers(self) -> list[str]:
        return self.meta.triggers or []

    @property
    def exclusions(self) -> list[str]:
        return self.meta.exclusions or []


Severity = Literal["error", "warning"]


class Issue(msgspec.Struct, frozen=True, kw_only=True):
    """One problem found in the skills: which file, which field, which rule."""

    file: str
    rule: str  # front-matter, schema, name, unique, required-skills, triggers, ...
    message: str
    field: str | None = None
    severity: Severity = "error"

    def line(self) -> str:
        where = self.file if self.field is None else f"{self.file}: field {self.field!r}"
        return f"{where}: {self.message} [{self.rule}]"
