"""`skills check` rules: one broken fixture per rule, each reported with its file
and field; the valid fixture set and the shipped skills pass."""

from __future__ import annotations

import datetime

import pytest
from skill_helpers import FIXTURES, SHIPPED_EVALS, SHIPPED_SKILLS

from gormes.skillbook.errors import SkillFileError, SkillsDirMissing
from gormes.skillbook.loader import load_skills, parse_skill
from gormes.skillbook.validator import check, conflicting_pairs

TODAY = datetime.date(2026, 6, 1)


def run_check(name: str):
    loaded = load_skills(FIXTURES / name)
    return check(loaded.skills, loaded.issues, today=TODAY)


@pytest.mark.parametrize(
    ("fixture", "rule", "field", "fragment"),
    [
        ("broken-yaml", "front-matter", None, "broken YAML (front matter line"),
        ("no-front-matter", "front-matter", None, "does not start with a '---'"),
        ("unclosed-front-matter", "front-matter", None, "not closed"),
        ("not-a-mapping", "front-matter", None, "not a YAML mapping"),
        ("unknown-field", "schema", "colour", "unknown field"),
        ("wrong-type", "schema", "triggers[0]", "Expected `str`, got `int`"),
        ("bad-status", "schema", "status", "Invalid enum value 'experimental'"),
        ("name-mismatch", "name", "name", "directory is 'folder'"),
        ("duplicate-name", "unique", "name", "also used by"),
        ("missing-required", "required-skills", "required_skills[0]", "'ghost' is not a skill"),
        ("triggers-missing", "triggers", "triggers", "not declared"),
        ("triggers-empty", "triggers", "triggers", "is empty"),
        ("bad-regex", "triggers", "triggers[0]", "not a valid regular expression"),
        ("exclusions-missing", "exclusions", "exclusions", "not declared"),
        ("evidence-empty-ref", "evidence", "evidence[0].ref", "is empty"),
        ("evidence-bad-type", "schema", "evidence[0].type", "Invalid enum value 'rumour'"),
        ("evidence-bad-date", "schema", "evidence[0].date", "Invalid RFC3339"),
        ("evidence-future", "evidence", "evidence[0].date", "in the future"),
        ("status-evidence-empty", "status-evidence", "status_evidence", "is empty"),
        ("proven-short", "status", "status", "at least 3 evidence entries, it has 1"),
        ("promoted-no-consumer", "status", "status", "cited: 'nobody'"),
        ("promoted-no-promotion-entry", "status", "status", "type 'promotion'"),
        ("conflict", "conflict", "triggers", "left and right both answer 'shared thing'"),
        ("missing-skill-md", "front-matter", None, "no SKILL.md"),
    ],
)
def test_each_broken_fixture_fails_its_rule_naming_file_and_field(fixture, rule, field, fragment):
    report = run_check(fixture)
    assert not report.ok
    hits = [i for i in report.errors if i.rule == rule]
    assert hits, report.issues
    issue = hits[0]
    assert issue.field == field
    assert fragment in issue.message
    assert f"fixtures/{fixture}/" in issue.file
    assert issue.file in issue.line()


def test_the_valid_fixture_set_passes():
    report = run_check("good")
    assert report.issues == []
    assert report.ok
    assert report.skills == ["alpha", "beta", "consumer", "delta", "gamma", "retired"]


def test_the_shipped_skills_pass_with_the_eval_phrases_as_probes():
    from gormes.skillbook.evals import load_cases

    loaded = load_skills(SHIPPED_SKILLS)
    probes = [c.phrase for c in load_cases(SHIPPED_EVALS)]
    report = check(loaded.skills, loaded.issues, probes=probes, today=datetime.date.today())
    assert report.issues == []
    assert report.skills == ["doctor-triage", "job-orchestration", "knowledge-routing", "replay-forensics"]
    assert {s.status for s in loaded.skills} == {"candidate"}


def test_an_exclusion_is_what_separates_two_skills():
    loaded = load_skills(FIXTURES / "conflict")
    assert conflicting_pairs(loaded.skills) == {("left", "right"): "shared thing"}
    left, right = sorted(loaded.skills, key=lambda s: s.name)
    import msgspec

    separated = msgspec.structs.replace(right, meta=msgspec.structs.replace(right.meta, exclusions=["left"]))
    # 'left' is not in the probe 'shared thing', so the pair still conflicts there...
    assert conflicting_pairs([left, separated]) == {("left", "right"): "shared thing"}
    fenced = msgspec.structs.replace(right, meta=msgspec.structs.replace(right.meta, exclusions=["re:^shared"]))
    # ...while an exclusion that matches the shared phrase separates them.
    assert conflicting_pairs([left, fenced]) == {}


def test_eval_phrases_are_conflict_probes_too():
    loaded = load_skills(FIXTURES / "good")
    assert conflicting_pairs(loaded.skills) == {}
    # beta's bare 'thing' and consumer's 'consume it' never meet in a trigger, but a probe joins them
    assert conflicting_pairs(loaded.skills, ["consume it thing"]) == {("beta", "consumer"): "consume it thing"}


def test_disabled_skills_take_no_part_in_conflicts():
    loaded = load_skills(FIXTURES / "good")
    assert "retired" not in {n for pair in conflicting_pairs(loaded.skills, ["retired thing"]) for n in pair}


def test_parse_errors_name_the_file_and_the_field(tmp_path):
    text = (FIXTURES / "wrong-type" / "typed" / "SKILL.md").read_text()
    with pytest.raises(SkillFileError) as caught:
        parse_skill(text, tmp_path / "typed" / "SKILL.md", "skills/typed/SKILL.md")
    assert str(caught.value).startswith("skills/typed/SKILL.md: field 'triggers[0]': Expected `str`")


def test_the_body_is_kept_byte_for_byte(tmp_path):
    text = "---\nname: x\ndescription: d\nstatus: candidate\ntriggers: [x]\nexclusions: []\n---\n\n# X\r\n\n  indented ---\n"
    skill = parse_skill(text, tmp_path / "x" / "SKILL.md")
    assert skill.body == "\n# X\r\n\n  indented ---\n"


def test_a_missing_skills_directory_is_a_clear_error(tmp_path):
    with pytest.raises(SkillsDirMissing, match="nowhere: skills directory not found"):
        load_skills(tmp_path / "nowhere")
