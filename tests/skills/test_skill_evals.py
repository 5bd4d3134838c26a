"""Routing evals: the shipped set routes 100% (the CI gate); wrong routes become
failures and confusion pairs; eval files that cannot be read say so."""

from __future__ import annotations

import pytest
from skill_helpers import FIXTURES, SHIPPED_EVALS, SHIPPED_SKILLS

from gormes.skillbook.errors import EvalFileError
from gormes.skillbook.evals import EvalCase, load_cases, parse_cases, run_evals
from gormes.skillbook.loader import load_skills


def test_the_shipped_skills_route_every_shipped_eval_phrase():
    cases = load_cases(SHIPPED_EVALS)
    report = run_evals(load_skills(SHIPPED_SKILLS).skills, cases)
    assert report.failures == []
    assert report.accuracy == 1.0 and report.correct == report.total == len(cases)


def test_the_shipped_evals_cover_every_skill_none_and_confusing_phrases():
    cases = load_cases(SHIPPED_EVALS)
    expected = {c.expect for c in cases}
    assert expected == {None, "knowledge-routing", "job-orchestration", "replay-forensics", "doctor-triage"}
    assert sum(1 for c in cases if c.note) >= 8  # the confusing ones say why


def test_wrong_routes_are_failures_and_confusion_pairs():
    skills = load_skills(FIXTURES / "good").skills
    cases = [
        EvalCase(phrase="gamma thing", expect="gamma"),
        EvalCase(phrase="gamma thing", expect="beta"),
        EvalCase(phrase="beta thing", expect="gamma"),
        EvalCase(phrase="beta thing again", expect="gamma"),
        EvalCase(phrase="haiku", expect="beta"),
    ]
    report = run_evals(skills, cases)
    assert (report.total, report.correct, report.accuracy) == (5, 1, 0.2)
    assert [(c.expected, c.got, c.count) for c in report.confusion] == [
        ("gamma", "beta", 2), ("beta", "(none)", 1), ("beta", "gamma", 1),
    ]
    assert report.failures[0].why == "trigger 'gamma thing' matched (2 words), and 1 more: 'gamma'; exclusion 'gamma' ruled beta out"


def test_a_tie_counts_as_wrong():
    skills = load_skills(FIXTURES / "conflict").skills
    report = run_evals(skills, [EvalCase(phrase="shared thing", expect="left")])
    assert report.failures[0].got == "left|right"


def test_jsonl_and_yaml_cases_parse():
    assert parse_cases('{"phrase": "x", "expect": null}\n\n{"phrase": "y", "expect": "a"}\n', "e.jsonl") == [
        EvalCase(phrase="x", expect=None, source="e.jsonl"), EvalCase(phrase="y", expect="a", source="e.jsonl"),
    ]
    assert parse_cases("- {phrase: x, expect: a}\n", "e.yaml") == [EvalCase(phrase="x", expect="a", source="e.yaml")]


@pytest.mark.parametrize(
    ("text", "source", "message"),
    [
        ("cases: [unclosed", "e.yaml", "e.yaml: broken YAML"),
        ("cases: 3", "e.yaml", "e.yaml: expected a list of cases"),
        ("- {phrase: x, expect: a, colour: red}", "e.yaml", "e.yaml: case 1: Object contains unknown field `colour`"),
        ('{"phrase": "x"', "e.jsonl", "e.jsonl: line 1: not JSON"),
    ],
)
def test_broken_eval_files_say_where(text, source, message):
    with pytest.raises(EvalFileError, match="^" + message.replace("[", r"\[")):
        parse_cases(text, source)
