"""Promotion: one step up only when the evidence holds; recorded as an event and
in the front matter, the body untouched; refused otherwise, nothing written."""

from __future__ import annotations

import datetime

import pytest
from skill_helpers import FIXTURES, fixture_copy

from gormes.events.skills import SkillPromoted, skill_stream
from gormes.skillbook.errors import PromotionRefused, UnknownSkill
from gormes.skillbook.loader import load_skill_file, load_skills, parse_skill
from gormes.skillbook.promotion import plan_promotion, promote, render_skill
from gormes.skillbook.validator import check

TODAY = datetime.date(2026, 6, 1)


async def test_a_candidate_with_three_entries_becomes_proven(tmp_path, store):
    root = fixture_copy("good", tmp_path)
    path = root / "alpha" / "SKILL.md"
    text = path.read_text()
    text = text.replace("evidence: []", (
        "evidence:\n"
        "  - {date: 2026-01-05, type: run, ref: run-1, note: one}\n"
        "  - {date: 2026-01-06, type: run, ref: run-2, note: two}\n"
        "  - {date: 2026-01-07, type: eval, ref: evals/skills, note: three}"
    ))
    path.write_text(text)
    body = load_skill_file(path).body

    result = await promote(root, "alpha", store, TODAY)

    assert (result.from_status, result.to_status) == ("candidate", "proven")
    after = load_skill_file(path)
    assert after.status == "proven"
    assert after.body == body
    assert after.meta.status_evidence.startswith("proven since 2026-06-01 (gormes skills promote, from candidate)")
    assert [e.ref for e in after.meta.evidence] == ["run-1", "run-2", "evals/skills"]
    (recorded,) = await store.read_stream(skill_stream("alpha"))
    assert recorded.position == result.position
    event = recorded.event
    assert isinstance(event, SkillPromoted)
    assert (event.skill, event.from_status, event.to) == ("alpha", "candidate", "proven")
    assert [e.ref for e in event.evidence] == ["run-1", "run-2", "evals/skills"]
    assert check(load_skills(root).skills, today=TODAY).ok


async def test_short_evidence_is_refused_and_nothing_is_written(tmp_path, store):
    root = fixture_copy("good", tmp_path)
    before = (root / "alpha" / "SKILL.md").read_bytes()
    with pytest.raises(PromotionRefused, match="alpha stays candidate: proven needs at least 3 evidence entries, it has 0"):
        await promote(root, "alpha", store, TODAY)
    assert (root / "alpha" / "SKILL.md").read_bytes() == before
    assert await store.head() == 0
    assert sorted(p.name for p in (root / "alpha").iterdir()) == ["SKILL.md"]


async def test_a_promotion_whose_transaction_fails_leaves_the_file_as_it_was(tmp_path, store):
    """The rename comes after the event's transaction: one undone (here by its seal,
    the call's audit record, failing) leaves no event and the file untouched."""
    root = fixture_copy("good", tmp_path)
    path = root / "alpha" / "SKILL.md"
    path.write_text(path.read_text().replace("evidence: []", (
        "evidence:\n  - {date: 2026-01-05, type: run, ref: run-1}\n"
        "  - {date: 2026-01-06, type: run, ref: run-2}\n  - {date: 2026-01-07, type: review, ref: bob}"
    )))
    before = path.read_bytes()

    def failing(tx):
        raise RuntimeError("the seal failed")

    with pytest.raises(RuntimeError, match="the seal failed"):
        await promote(root, "alpha", store, TODAY, seal=failing)
    assert path.read_bytes() == before
    assert await store.head() == 0
    assert sorted(p.name for p in (root / "alpha").iterdir()) == ["SKILL.md"]


async def test_proven_to_promoted_needs_a_consumer_that_requires_it(tmp_path, store):
    root = fixture_copy("good", tmp_path)
    with pytest.raises(PromotionRefused, match="type 'promotion'"):
        await promote(root, "beta", store, TODAY)
    beta = root / "beta" / "SKILL.md"
    beta.write_text(beta.read_text().replace(
        "note: third}", "note: third}\n  - {date: 2026-01-08, type: promotion, ref: consumer, note: used}"
    ))
    with pytest.raises(PromotionRefused, match="a consumer that lists 'beta' in its required_skills; cited: 'consumer'"):
        await promote(root, "beta", store, TODAY)
    consumer = root / "consumer" / "SKILL.md"
    consumer.write_text(consumer.read_text().replace("required_skills: [gamma]", "required_skills: [gamma, beta]"))
    result = await promote(root, "beta", store, TODAY)
    assert result.to_status == "promoted"
    assert load_skill_file(beta).status == "promoted"


@pytest.mark.parametrize(("name", "message"), [
    ("gamma", "already promoted: there is no higher status"),
    ("retired", "a disabled skill is not promoted"),
])
async def test_nothing_above_promoted_and_no_promoting_disabled(tmp_path, store, name, message):
    root = fixture_copy("good", tmp_path)
    with pytest.raises(PromotionRefused, match=message):
        await promote(root, name, store, TODAY)


async def test_unknown_and_broken_skills_are_refused(tmp_path, store):
    root = fixture_copy("good", tmp_path)
    with pytest.raises(UnknownSkill, match="no skill named 'ghost'"):
        await promote(root, "ghost", store, TODAY)
    broken = fixture_copy("broken-yaml", tmp_path)
    with pytest.raises(PromotionRefused, match="oops cannot be promoted: .*broken YAML"):
        await promote(broken, "oops", store, TODAY)


def test_rendered_front_matter_parses_back_to_the_same_skill():
    for skill in load_skills(FIXTURES / "good").skills:
        again = parse_skill(render_skill(skill.meta, skill.body), skill.path)
        assert again.meta == skill.meta
        assert again.body == skill.body


def test_the_plan_refuses_without_touching_anything():
    skills = load_skills(FIXTURES / "good").skills
    consumer = next(s for s in skills if s.name == "consumer")
    with pytest.raises(PromotionRefused, match="consumer stays proven: promoted needs an evidence entry of type 'promotion'"):
        plan_promotion(consumer, skills, TODAY)
