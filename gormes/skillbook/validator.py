"""`gormes skills check`: every rule a set of skills must keep, as pure functions
over parsed skills (the loader reports the files that did not parse).

Rules (the `rule` of each issue): front-matter, schema (from the loader); name
(matches its directory), unique, required-skills, triggers, exclusions, evidence,
status-evidence, status, conflict.

Conflicts are found by probing, deterministically: every plain trigger of every
skill is itself a phrase, and so is every routing eval phrase. If two skills that
may be routed to (any status but disabled) both have a trigger matching a probe
and neither has an exclusion matching it, nothing separates them there: that
pair conflicts, reported once, with the first probe (in sorted order) that shows it.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Sequence

import msgspec

from gormes.skillbook.matching import compiled, is_regex, matches, words
from gormes.skillbook.model import PROVEN_MIN_EVIDENCE, Issue, Skill


class CheckReport(msgspec.Struct, frozen=True, kw_only=True):
    skills: list[str]  # the names of the skills that parsed
    issues: list[Issue]

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors


def check(
    skills: Sequence[Skill],
    load_issues: Sequence[Issue] = (),
    *,
    probes: Iterable[str] = (),
    today: datetime.date | None = None,
) -> CheckReport:
    issues = list(load_issues)
    by_name: dict[str, Skill] = {}
    for skill in skills:
        file = _file(skill)
        if skill.name in by_name:
            issues.append(Issue(
                file=file, rule="unique", field="name",
                message=f"name {skill.name!r} is also used by {_file(by_name[skill.name])}",
            ))
        else:
            by_name[skill.name] = skill
        issues.extend(check_one(skill, today=today))
    for skill in skills:
        issues.extend(check_required(skill, by_name))
        issues.extend(check_status(skill, by_name))
    issues.extend(check_conflicts(list(by_name.values()), probes))
    return CheckReport(skills=sorted(by_name), issues=issues)


def check_one(skill: Skill, *, today: datetime.date | None = None) -> list[Issue]:
    """The rules one skill keeps on its own."""
    file, meta = _file(skill), skill.meta
    issues: list[Issue] = []

    def add(rule: str, field: str | None, message: str) -> None:
        issues.append(Issue(file=file, rule=rule, field=field, message=message))

    directory = skill.path.parent.name
    if directory and meta.name != directory:
        add("name", "name", f"is {meta.name!r} but the skill's directory is {directory!r}")
    if not meta.description.strip():
        add("name", "description", "is empty")
    if meta.triggers is None:
        add("triggers", "triggers", "not declared: list the phrases or patterns this skill answers")
    elif not meta.triggers:
        add("triggers", "triggers", "is empty: a skill nothing can route to")
    if meta.exclusions is None:
        add("exclusions", "exclusions", "not declared: list what this skill must not answer ([] for nothing)")
    for field, phrases in (("triggers", meta.triggers or []), ("exclusions", meta.exclusions or [])):
        for index, phrase in enumerate(phrases):
            problem = _phrase_problem(phrase)
            if problem:
                add(field, f"{field}[{index}]", problem)
    for index, entry in enumerate(meta.evidence):
        if not entry.ref.strip():
            add("evidence", f"evidence[{index}].ref", "is empty: say where the evidence is")
        if today is not None and entry.date > today:
            add("evidence", f"evidence[{index}].date", f"{entry.date} is in the future")
    if not meta.status_evidence.strip():
        add("status-evidence", "status_evidence", "is empty: say honestly why the status is what it is")
    return issues


def _phrase_problem(phrase: str) -> str | None:
    if not phrase.strip():
        return "is blank"
    if is_regex(phrase):
        try:
            compiled(phrase)
        except re.error as exc:
            return f"{phrase!r} is not a valid regular expression: {exc}"
        return None
    if not words(phrase):
        return f"{phrase!r} has no words left once filler words are dropped"
    return None


def check_required(skill: Skill, by_name: dict[str, Skill]) -> list[Issue]:
    issues = []
    for index, required in enumerate(skill.meta.required_skills):
        if required == skill.name:
            message = "a skill cannot require itself"
        elif required not in by_name:
            message = f"{required!r} is not a skill here"
        elif by_name[required].status == "disabled" and skill.status != "disabled":
            message = f"{required!r} is disabled"
        else:
            continue
        issues.append(Issue(file=_file(skill), rule="required-skills", field=f"required_skills[{index}]", message=message))
    return issues


def status_problem(skill: Skill, status: str, by_name: dict[str, Skill]) -> str | None:
    """Why `skill` may not hold `status` given its evidence, or None if it may."""
    evidence = skill.meta.evidence
    if status in ("candidate", "disabled"):
        return None
    if len(evidence) < PROVEN_MIN_EVIDENCE:
        return f"{status} needs at least {PROVEN_MIN_EVIDENCE} evidence entries, it has {len(evidence)}"
    if status == "proven":
        return None
    promotions = [e for e in evidence if e.type == "promotion"]
    if not promotions:
        return "promoted needs an evidence entry of type 'promotion' citing a consumer skill"
    for entry in promotions:
        consumer = by_name.get(entry.ref.strip())
        if consumer is not None and consumer.name != skill.name and skill.name in consumer.meta.required_skills:
            return None
    refs = ", ".join(repr(e.ref) for e in promotions)
    return (
        f"promoted needs a 'promotion' entry citing a consumer that lists {skill.name!r} "
        f"in its required_skills; cited: {refs}"
    )


def check_status(skill: Skill, by_name: dict[str, Skill]) -> list[Issue]:
    problem = status_problem(skill, skill.status, by_name)
    if problem is None:
        return []
    return [Issue(file=_file(skill), rule="status", field="status", message=problem)]


def conflicting_pairs(skills: Sequence[Skill], probes: Iterable[str] = ()) -> dict[tuple[str, str], str]:
    """{(skill a, skill b): the first probe phrase both answer unseparated}."""
    live = sorted((s for s in skills if s.status != "disabled"), key=lambda s: s.name)
    phrases = set(probes)
    for skill in live:
        phrases.update(t for t in skill.triggers if not is_regex(t) and t.strip())
    pairs: dict[tuple[str, str], str] = {}
    for phrase in sorted(phrases):
        phrase_words = words(phrase)
        answering = [
            s.name for s in live
            if any(matches(t, phrase, phrase_words) for t in s.triggers)
            and not any(matches(x, phrase, phrase_words) for x in s.exclusions)
        ]
        for i, first in enumerate(answering):
            for second in answering[i + 1:]:
                pairs.setdefault((first, second), phrase)
    return pairs


def check_conflicts(skills: Sequence[Skill], probes: Iterable[str] = ()) -> list[Issue]:
    by_name = {s.name: s for s in skills}
    return [
        Issue(
            file=_file(by_name[first]), rule="conflict", field="triggers",
            message=(
                f"{first} and {second} both answer {phrase!r} and no exclusion separates them"
            ),
        )
        for (first, second), phrase in sorted(conflicting_pairs(skills, probes).items())
    ]


def _file(skill: Skill) -> str:
    return skill.file or str(skill.path)
