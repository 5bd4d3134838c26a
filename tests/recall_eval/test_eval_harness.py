"""The harness end to end on small fixtures (a real scratch database and the
real recall engine), and its privacy judgement on results made by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from pg_helpers import PG_URL, require_postgres

from gormes.recall.api import ModeStatus, RecallHit, RecallResult, ScoreBreakdown, Why
from gormes.recall.eval_fixtures import parse_fixtures, seed_events
from gormes.recall.evals import judge, run_recall_evals

WORLD = """
name: world
conversations:
  - scope: chat:a
    run: r-a
    turns:
      - text: Ada Lovelace works at Initech.
        at: 100
        entities: [{name: Ada Lovelace, kind: person, aliases: [Ada]}]
        relationships: [{key: ada-initech, subject: Ada Lovelace, predicate: works_at, object: Initech}]
        facts: [{key: ada-job, text: Ada Lovelace works at Initech, subject: Ada Lovelace}]
  - scope: chat:b
    run: r-b
    turns:
      - text: Ada's birthday is on May 3.
        at: 200
        facts: [{key: birthday, text: Ada Lovelace's birthday is on May 3, subject: Ada Lovelace}]
queries:
  - {id: job, query: where does Ada Lovelace work, scope: chat:a, relevant: [ada-job, ada-initech], tags: [t]}
  - {id: leak, query: "Ada Lovelace birthday", scope: chat:a, relevant: [], never: [birthday], tags: [cross-scope]}
  - {id: denied, query: birthday, scope: chat:a, cross_scope: true, trust: gateway, expect_denied: true}
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_small_world_is_seeded_recalled_and_scored_per_mode(backend):
    if backend == "postgres":
        require_postgres()
    (fixture,) = parse_fixtures(WORLD, "world.yaml")
    report = await run_recall_evals([fixture], modes=["lexical", "graph", "fused"], k=3,
                                    postgres_url=PG_URL if backend == "postgres" else None)
    assert report.ok and report.queries == 3 and [m.mode for m in report.modes] == ["lexical", "graph", "fused"]
    for mode in report.modes:
        assert mode.scored.queries == 1 and mode.negatives == 2 and mode.privacy_violations == 0
        assert set(mode.by_tag) == {"t"}
    fused_job = next(o for o in report.outcomes if o.mode == "fused" and o.query == "job")
    assert set(fused_job.returned[:2]) == {"ada-job", "ada-initech"} and fused_job.scores.recall == 1.0
    graph_job = next(o for o in report.outcomes if o.mode == "graph" and o.query == "job")
    assert any("seed Ada Lovelace" in why for hit in graph_job.hits for why in hit.why)
    denied = [o for o in report.outcomes if o.query == "denied"]
    assert all(o.denied and o.scores is None for o in denied)
    leak = [o for o in report.outcomes if o.query == "leak"]
    assert all("birthday" not in o.returned for o in leak)


async def test_semantic_off_is_reported_not_scored():
    (fixture,) = parse_fixtures(WORLD, "world.yaml")
    report = await run_recall_evals([fixture], modes=["semantic"], k=3)
    (semantic,) = report.modes
    assert semantic.enabled == (semantic.reason == "")  # off is always said, with why
    assert semantic.scored.queries == 1 and report.ok


async def test_an_allowed_cross_scope_recall_expected_to_be_refused_is_a_violation():
    fixture_text = WORLD.replace("trust: gateway, expect_denied: true", "trust: operator, expect_denied: true")
    (fixture,) = parse_fixtures(fixture_text, "world.yaml")
    report = await run_recall_evals([fixture], modes=["lexical"], k=3)
    assert not report.ok
    (violation,) = report.privacy_violations
    assert (violation.query, violation.hit) == ("denied", None) and "was not refused" in violation.reason


def hit(item_id: str, scope: str, review_state: str = "trusted") -> RecallHit:
    return RecallHit(id=item_id, kind="fact", text="t", scope=scope, review_state=review_state, score=1.0,
                     scores=ScoreBreakdown(), why=(Why(mode="lexical", reason="bm25 match on t"),))


def result(*hits: RecallHit, cross_scope: bool = False) -> RecallResult:
    return RecallResult(query="q", mode="lexical", k=5, scope="chat:a", cross_scope=cross_scope, scopes=("chat:a",),
                        hits=hits, modes=(ModeStatus(mode="lexical", enabled=True),))


def test_a_hit_from_another_scope_is_a_violation():
    (fixture,) = parse_fixtures(WORLD, "world.yaml")
    seed = seed_events(fixture)
    leaked = seed.items["birthday"].id
    outcome = judge(fixture, seed, "leak", "lexical", result(hit(leaked, "chat:b")), 5)
    reasons = [v.reason for v in outcome.violations]
    assert reasons == ["from scope chat:b in a chat:a query without cross-scope recall",
                       "listed under `never` for this query"]
    assert outcome.violations[0].hit == "birthday"


def test_unreviewed_or_rejected_items_from_elsewhere_are_violations_even_across_scopes():
    fixture_text = WORLD.replace("trust: gateway, expect_denied: true", "trust: operator")
    (fixture,) = parse_fixtures(fixture_text, "world.yaml")
    seed = seed_events(fixture)
    other = seed.items["birthday"].id
    clean = judge(fixture, seed, "denied", "lexical", result(hit(other, "chat:b"), cross_scope=True), 5)
    assert clean.violations == []
    for state in ("unreviewed", "rejected"):
        dirty = judge(fixture, seed, "denied", "lexical", result(hit(other, "chat:b", state), cross_scope=True), 5)
        assert [v.reason for v in dirty.violations] == [f"{state} item from scope chat:b outside its own scope"]


def test_scores_use_only_the_top_k_and_explain_each_hit():
    (fixture,) = parse_fixtures(WORLD, "world.yaml")
    seed = seed_events(fixture)
    job, rel = seed.items["ada-job"].id, seed.items["ada-initech"].id
    outcome = judge(fixture, seed, "job", "lexical", result(hit("other", "chat:a"), hit(job, "chat:a"), hit(rel, "chat:a")), 2)
    assert outcome.returned == ["other", "ada-job"] and outcome.scores.recall == 0.5
    assert outcome.scores.reciprocal_rank == 0.5
    assert [(h.rank, h.key, h.relevant, h.why) for h in outcome.hits] == [
        (1, None, False, ["lexical: bm25 match on t"]), (2, "ada-job", True, ["lexical: bm25 match on t"])]


async def test_the_shipped_fixtures_on_postgres_leak_nothing():
    """`gormes --db postgresql://... eval recall`: the same privacy bar as on SQLite
    (its ranking numbers are reported in docs/postgres.md, not gated)."""
    require_postgres()
    from gormes.events.catalog import load_all
    from gormes.recall.eval_fixtures import load_fixtures

    load_all()
    fixtures = load_fixtures(Path(__file__).parents[2] / "evals" / "recall")
    report = await run_recall_evals(fixtures, modes=["lexical", "graph", "fused"], k=5, postgres_url=PG_URL)
    assert report.ok and not report.privacy_violations
    assert all(m.scored.queries > 0 for m in report.modes)
