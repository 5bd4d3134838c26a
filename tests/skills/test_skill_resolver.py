"""The resolver: scores and reasons, exclusions, statuses, what reaches a prompt."""

from __future__ import annotations

import pytest
from skill_helpers import FIXTURES

from gormes.skillbook.loader import load_skills
from gormes.skillbook.matching import matches, stem, weight, words
from gormes.skillbook.resolver import prompt_skills, route, visible_skills


@pytest.fixture(scope="module")
def skills():
    return load_skills(FIXTURES / "good").skills


def test_the_heaviest_trigger_wins_and_says_which(skills):
    result = route(skills, "the gamma thing again")
    assert [m.skill for m in result.chosen] == ["gamma"]
    gamma = result.chosen[0]
    assert gamma.triggers == ["gamma thing", "gamma"]
    assert gamma.score == 2.1  # two words, plus one more trigger matched
    assert gamma.why == "trigger 'gamma thing' matched (2 words), and 1 more: 'gamma'"


def test_an_exclusion_rules_a_skill_out_and_is_reported(skills):
    result = route(skills, "a gamma thing")
    assert result.choice == "gamma"
    assert [(r.skill, r.exclusion) for r in result.ruled_out] == [("beta", "gamma")]
    assert result.ruled_out[0].why == "exclusion 'gamma' ruled beta out"


def test_a_skill_whose_triggers_did_not_match_is_not_reported_as_ruled_out(skills):
    assert route(skills, "consume it").ruled_out == []


def test_candidates_are_routed_only_when_asked(skills):
    assert route(skills, "alpha thing").chosen == []
    asked = route(skills, "alpha thing", include_candidates=True)
    assert asked.choice == "alpha" and asked.chosen[0].status == "candidate"


def test_regex_triggers_match_and_weigh_their_words(skills):
    result = route(skills, "look at ALPHA-42 please", include_candidates=True)
    assert result.choice == "alpha"
    assert result.chosen[0].triggers == [r"re:\balpha-\d+\b"]
    assert weight(r"re:\balpha-\d+\b") == 3  # b, alpha, d: words in the source


def test_disabled_skills_are_never_routed(skills):
    for candidates in (False, True):
        assert route(skills, "retired thing", include_candidates=candidates).chosen == []


def test_no_trigger_means_no_skill(skills):
    result = route(skills, "write a haiku", include_candidates=True)
    assert result.chosen == [] and result.choice is None and not result.ambiguous


def test_a_tie_at_the_top_is_ambiguous_and_chooses_both():
    conflicting = load_skills(FIXTURES / "conflict").skills
    result = route(conflicting, "shared thing", include_candidates=True)
    assert [m.skill for m in result.chosen] == ["left", "right"]
    assert result.ambiguous and result.choice is None


def test_visible_skills_hide_disabled_candidates_and_manual_ones(skills):
    assert [s.name for s in visible_skills(skills)] == ["beta", "consumer", "gamma"]
    assert [s.name for s in visible_skills(skills, include_candidates=True)] == ["alpha", "beta", "consumer", "gamma"]
    assert "delta" in [s.name for s in visible_skills(skills, include_manual=True)]
    assert "retired" not in [s.name for s in visible_skills(skills, True, include_manual=True)]


def test_only_proven_or_promoted_skills_reach_a_prompt(skills):
    everything = [s.name for s in skills]
    assert [s.name for s in prompt_skills(skills, everything)] == ["beta", "consumer", "gamma"]
    assert prompt_skills(skills, ["alpha", "retired", "delta"]) == []


@pytest.mark.parametrize(
    ("forms", "stemmed"),
    [
        (["fork", "forks", "forked", "forking"], "fork"),
        (["pause", "paused", "pausing"], "paus"),
        (["run", "runs", "running"], "run"),
        (["cancel", "cancelled", "canceled"], "cancel"),
    ],
)
def test_word_forms_meet_at_one_stem(forms, stemmed):
    assert {stem(f) for f in forms} == {stemmed}


def test_triggers_match_all_their_words_in_any_order_without_filler():
    assert words("Fork THE run, please!") == {"fork", "run"}
    assert matches("fork a run", "the run I want to fork")
    assert not matches("fork a run", "fork the job")
    assert not matches("re:(broken", "anything")  # an invalid pattern never matches
