"""The recall eval harness: seed each fixture into a scratch database through
the memory events, run its queries in every mode, and score what came back.

    report = await run_recall_evals(load_fixtures(Path("evals/recall")), modes=MODES, k=5)

Per mode: precision@k, recall@k, MRR and nDCG@k over the queries that have
relevant items (gormes/recall/eval_metrics.py), how often a stale (superseded)
fact came first, and privacy violations, which must be 0. A privacy violation is
a hit the query's caller may not see: from another scope without cross-scope
recall; from another scope while unreviewed or rejected; forgotten or rejected
anywhere; a key the fixture lists under `never`; or a cross-scope recall that was
expected to be refused and was not. Each hit is explained by why its mode chose
it (the graph's seed and path, the lexical terms).
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from gormes.events.scratch_store import scratch_store
from gormes.events.store import AppendRequest
from gormes.recall.api import (
    MODES,
    CrossScopeDenied,
    RecallHit,
    RecallResult,
    Why,
    recall_in_store,
)
from gormes.recall.eval_fixtures import Fixture, QuerySpec, Seed, seed_events
from gormes.recall.eval_metrics import (
    MeanScores,
    RankingScores,
    mean_scores,
    score_ranking,
)

HIDDEN_ELSEWHERE = frozenset({"unreviewed", "rejected"})


class HitExplanation(msgspec.Struct, frozen=True, kw_only=True):
    rank: int
    id: str
    key: str | None  # the fixture's key for it, when it has one
    text: str
    scope: str
    relevant: bool
    stale: bool
    why: list[str]


class PrivacyViolation(msgspec.Struct, frozen=True, kw_only=True):
    fixture: str
    query: str  # the query id
    mode: str
    hit: str | None  # the hit's key (or id); None for a denial that did not happen
    scope: str | None
    reason: str


class QueryOutcome(msgspec.Struct, frozen=True, kw_only=True):
    fixture: str
    query: str  # the query id
    text: str
    mode: str
    scope: str
    tags: list[str]
    relevant: list[str]  # keys
    returned: list[str]  # keys (or ids) of the top k, best first
    scores: RankingScores | None  # None for negative and denied queries
    denied: bool
    violations: list[PrivacyViolation]
    hits: list[HitExplanation]


class ModeReport(msgspec.Struct, frozen=True, kw_only=True):
    mode: str
    enabled: bool
    reason: str  # why it is disabled ("" when enabled)
    scored: MeanScores  # over queries with relevant items
    by_tag: dict[str, MeanScores]
    negatives: int  # queries that must return nothing of what they may not see
    stale_first: int  # scored queries whose top hit was a superseded fact
    privacy_violations: int


class EvalReport(msgspec.Struct, frozen=True, kw_only=True):
    k: int
    fixtures: list[str]
    queries: int
    modes: list[ModeReport]
    privacy_violations: list[PrivacyViolation]
    outcomes: list[QueryOutcome]

    @property
    def ok(self) -> bool:
        return not self.privacy_violations


async def run_recall_evals(
    fixtures: Sequence[Fixture], *, modes: Sequence[str] = MODES, k: int = 5, postgres_url: str | None = None,
) -> EvalReport:
    """Seed each fixture into a scratch database and score its queries: a temp
    SQLite file, or with `postgres_url` a scratch schema there (dropped after)."""
    outcomes: list[QueryOutcome] = []
    statuses: dict[str, tuple[bool, str]] = {}
    for fixture in fixtures:
        with tempfile.TemporaryDirectory(prefix="gormes-recall-eval-") as scratch:
            fixture_outcomes, fixture_statuses = await _run_fixture(
                fixture, postgres_url or Path(scratch) / "eval.db", modes, k)
        outcomes.extend(fixture_outcomes)
        for mode, status in fixture_statuses.items():
            statuses.setdefault(mode, status)
    reports = [_mode_report(mode, statuses.get(mode, (True, "")), [o for o in outcomes if o.mode == mode])
               for mode in modes]
    violations = [v for o in outcomes for v in o.violations]
    return EvalReport(k=k, fixtures=[f.name for f in fixtures], queries=sum(len(f.queries) for f in fixtures),
                      modes=reports, privacy_violations=violations, outcomes=outcomes)


async def _run_fixture(
    fixture: Fixture, target: str | Path, modes: Sequence[str], k: int,
) -> tuple[list[QueryOutcome], dict[str, tuple[bool, str]]]:
    seed = seed_events(fixture)
    outcomes: list[QueryOutcome] = []
    statuses: dict[str, tuple[bool, str]] = {}
    async with scratch_store(target, "gormes_recall_eval") as store:
        await store.append_many([AppendRequest(stream, events) for stream, events in seed.events.items()])
        for query in fixture.queries:
            for mode in modes:
                try:
                    result = await recall_in_store(
                        store, query.query, mode=mode, k=k, scope=query.scope,
                        cross_scope=query.cross_scope, trust=query.trust)
                except CrossScopeDenied:
                    outcomes.append(judge(fixture, seed, query.id, mode, None, k))
                    continue
                for status in result.modes:
                    if status.mode == mode:
                        statuses.setdefault(mode, (status.enabled, status.reason))
                outcomes.append(judge(fixture, seed, query.id, mode, result, k))
    return outcomes, statuses


def judge(fixture: Fixture, seed: Seed, query_id: str, mode: str, result: RecallResult | None, k: int) -> QueryOutcome:
    """Score one query's result in one mode (None: the recall was refused). Pure."""
    query = next(q for q in fixture.queries if q.id == query_id)
    key_of = {item.id: key for key, item in seed.items.items()}
    relevant_ids = {seed.items[key].id for key in query.relevant}
    hits = list(result.hits[:k]) if result is not None else []
    ranked = [hit.id for hit in hits]
    violations = [_violation(fixture, query.id, mode, reason, hit, key_of)
                  for hit in hits for reason in privacy_problems(hit, query, seed, fixture)]
    if query.expect_denied and result is not None:
        violations.append(PrivacyViolation(
            fixture=fixture.name, query=query.id, mode=mode, hit=None, scope=None,
            reason=f"cross-scope recall by a {query.trust!r} caller was not refused"))
    scores = score_ranking(ranked, relevant_ids, k) if relevant_ids and result is not None else None
    return QueryOutcome(
        fixture=fixture.name, query=query.id, text=query.query, mode=mode, scope=query.scope,
        tags=list(query.tags), relevant=list(query.relevant), returned=[key_of.get(i, i) for i in ranked],
        scores=scores, denied=result is None, violations=violations,
        hits=[_explain(rank, hit, key_of, relevant_ids) for rank, hit in enumerate(hits, 1)],
    )


def privacy_problems(hit: RecallHit, query: QuerySpec, seed: Seed, fixture: Fixture) -> list[str]:
    """Why `hit` must not have been returned to `query` (empty when it may be)."""
    problems = []
    elsewhere = hit.scope != query.scope
    if elsewhere and not query.cross_scope:
        problems.append(f"from scope {hit.scope} in a {query.scope} query without cross-scope recall")
    elif elsewhere and hit.review_state in HIDDEN_ELSEWHERE:
        problems.append(f"{hit.review_state} item from scope {hit.scope} outside its own scope")
    if hit.review_state == "rejected" and not elsewhere:
        problems.append("rejected by review")
    forgotten = {seed.items[f.target].id for f in fixture.forget}
    if hit.id in forgotten:
        problems.append("forgotten")
    if hit.id in {seed.items[key].id for key in query.never}:
        problems.append("listed under `never` for this query")
    return problems


def _violation(fixture: Fixture, query_id: str, mode: str, reason: str, hit: RecallHit,
               key_of: dict[str, str]) -> PrivacyViolation:
    return PrivacyViolation(fixture=fixture.name, query=query_id, mode=mode, hit=key_of.get(hit.id, hit.id),
                            scope=hit.scope, reason=reason)


def explain_why(why: Why) -> str:
    """One line per reason: the graph's seed and the path walked, or the mode's own reason."""
    if why.seed is not None:
        seed = why.seed_name or why.seed
        walk = ", ".join(f"{step.subject} -{step.predicate}-> {step.object}" for step in why.path)
        depth = f", depth {why.depth}" if why.depth is not None else ""
        return f"{why.mode}: seed {seed}: {walk or 'a fact about the seed'}{depth}"
    return f"{why.mode}: {why.reason}"


def _explain(rank: int, hit: RecallHit, key_of: dict[str, str], relevant: set[str]) -> HitExplanation:
    return HitExplanation(rank=rank, id=hit.id, key=key_of.get(hit.id), text=hit.text, scope=hit.scope,
                          relevant=hit.id in relevant, stale=hit.stale, why=[explain_why(w) for w in hit.why])


def _mode_report(mode: str, status: tuple[bool, str], outcomes: list[QueryOutcome]) -> ModeReport:
    scored = [o for o in outcomes if o.scores is not None]
    tagged: dict[str, list[RankingScores]] = defaultdict(list)
    for outcome in scored:
        for tag in outcome.tags:
            tagged[tag].append(outcome.scores)  # type: ignore[arg-type]
    return ModeReport(
        mode=mode, enabled=status[0], reason=status[1],
        scored=mean_scores([o.scores for o in scored]),  # type: ignore[misc]
        by_tag={tag: mean_scores(scores) for tag, scores in sorted(tagged.items())},
        negatives=sum(1 for o in outcomes if not o.relevant),
        stale_first=sum(1 for o in scored if o.hits and o.hits[0].stale),
        privacy_violations=sum(len(o.violations) for o in outcomes),
    )
