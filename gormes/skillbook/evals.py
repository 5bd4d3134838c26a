"""Routing evals: phrases, each with the skill it must route to (or none).

Files under `evals/skills/`: YAML (`cases:` a list, or a bare list) or JSONL,
one case per item: `{phrase: ..., expect: skill-name | null, note: ...}`.
Evals route with candidates included (the shipped skills start as candidates and
must route right before they can earn anything). A route with several skills tied
at the top counts as wrong, reported as `a|b`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import msgspec
import yaml

from gormes.skillbook.errors import EvalFileError, SkillsDirMissing
from gormes.skillbook.model import Skill
from gormes.skillbook.resolver import route

NONE = "(none)"
EVAL_SUFFIXES = (".yaml", ".yml", ".jsonl")


class EvalCase(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    phrase: str
    expect: str | None
    note: str = ""
    source: str = ""  # the file it came from (set by the loader)


class EvalFailure(msgspec.Struct, frozen=True, kw_only=True):
    phrase: str
    expected: str
    got: str
    why: str
    source: str


class Confusion(msgspec.Struct, frozen=True, kw_only=True):
    expected: str
    got: str
    count: int


class EvalReport(msgspec.Struct, frozen=True, kw_only=True):
    total: int
    correct: int
    accuracy: float  # correct / total, 1.0 for no cases
    failures: list[EvalFailure]
    confusion: list[Confusion]  # (expected, got) pairs among the failures, most frequent first


def run_evals(skills: Sequence[Skill], cases: Sequence[EvalCase]) -> EvalReport:
    failures: list[EvalFailure] = []
    for case in cases:
        result = route(skills, case.phrase, include_candidates=True)
        got = "|".join(m.skill for m in result.chosen) or NONE
        expected = case.expect or NONE
        if got != expected:
            why = "; ".join([m.why for m in result.chosen] + [r.why for r in result.ruled_out]) or "no trigger matched"
            failures.append(EvalFailure(phrase=case.phrase, expected=expected, got=got, why=why, source=case.source))
    pairs = Counter((f.expected, f.got) for f in failures)
    confusion = [
        Confusion(expected=e, got=g, count=n)
        for (e, g), n in sorted(pairs.items(), key=lambda item: (-item[1], item[0]))
    ]
    total = len(cases)
    correct = total - len(failures)
    return EvalReport(
        total=total, correct=correct, accuracy=1.0 if total == 0 else round(correct / total, 4),
        failures=failures, confusion=confusion,
    )


def parse_cases(text: str, source: str) -> list[EvalCase]:
    """The cases of one eval file's text (YAML, or JSONL when `source` ends so)."""
    if source.endswith(".jsonl"):
        raw: list[object] = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    raw.append(msgspec.json.decode(line))
                except msgspec.DecodeError as exc:
                    raise EvalFileError(f"{source}: line {number}: not JSON: {exc}") from None
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise EvalFileError(f"{source}: broken YAML: {getattr(exc, 'problem', None) or exc}") from None
        raw = data.get("cases") if isinstance(data, dict) else data
        if not isinstance(raw, list):
            raise EvalFileError(f"{source}: expected a list of cases (or a mapping with `cases:`)")
    cases = []
    for index, item in enumerate(raw):
        try:
            case = msgspec.convert(item, EvalCase)
        except msgspec.ValidationError as exc:
            raise EvalFileError(f"{source}: case {index + 1}: {exc}") from None
        cases.append(msgspec.structs.replace(case, source=source))
    return cases


def load_cases(root: Path) -> list[EvalCase]:
    """Every case of every eval file under root (sorted by file name)."""
    if not root.is_dir():
        raise SkillsDirMissing(f"{root}: routing evals directory not found")
    cases: list[EvalCase] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(EVAL_SUFFIXES)):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise EvalFileError(f"{path}: cannot be read: {exc}") from None
        cases.extend(parse_cases(text, str(path)))
    return cases
