"""Retrieval metrics for the recall evals: pure functions over ranked ids.

Relevance is binary. With `ranked` the ids a mode returned (best first) and
`relevant` the ids a person marked as answers:

    precision@k  relevant among the first k, divided by k
    recall@k     relevant among the first k, divided by the number relevant
    reciprocal rank  1 / the rank of the first relevant id within the first k
                 (0 if none); MRR is its mean
    nDCG@k       DCG of the first k (gain 1 / log2(rank + 1) per relevant id)
                 over the DCG of an ideal ranking

A query with no relevant ids (a negative query: nothing should be recalled) has
no ranking metrics; it is judged by what it must not return instead.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import msgspec


class RankingScores(msgspec.Struct, frozen=True, kw_only=True):
    precision: float
    recall: float
    reciprocal_rank: float
    ndcg: float
    first_relevant_rank: int | None  # 1-based, within the whole returned list


class MeanScores(msgspec.Struct, frozen=True, kw_only=True):
    queries: int  # how many queries were averaged
    precision: float
    recall: float
    mrr: float
    ndcg: float


def precision_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    return sum(1 for item in ranked[:k] if item in relevant) / k


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    if not relevant:
        raise ValueError("recall@k needs at least one relevant id")
    return len(set(ranked[:k]) & set(relevant)) / len(set(relevant))


def first_relevant_rank(ranked: Sequence[str], relevant: Collection[str]) -> int | None:
    return next((rank for rank, item in enumerate(ranked, 1) if item in relevant), None)


def reciprocal_rank(ranked: Sequence[str], relevant: Collection[str]) -> float:
    rank = first_relevant_rank(ranked, relevant)
    return 0.0 if rank is None else 1.0 / rank


def ndcg_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    if not relevant:
        raise ValueError("nDCG@k needs at least one relevant id")
    seen: set[str] = set()
    dcg = 0.0
    for rank, item in enumerate(ranked[:k], 1):
        if item in relevant and item not in seen:
            seen.add(item)
            dcg += 1.0 / math.log2(rank + 1)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(set(relevant)), k) + 1))
    return dcg / ideal


def score_ranking(ranked: Sequence[str], relevant: Collection[str], k: int) -> RankingScores:
    if k < 1:
        raise ValueError("k must be at least 1")
    return RankingScores(
        precision=precision_at_k(ranked, relevant, k),
        recall=recall_at_k(ranked, relevant, k),
        reciprocal_rank=reciprocal_rank(ranked[:k], relevant),
        ndcg=ndcg_at_k(ranked, relevant, k),
        first_relevant_rank=first_relevant_rank(ranked, relevant),
    )


def mean_scores(scores: Sequence[RankingScores]) -> MeanScores:
    """The mean of each metric (all 0.0 over no queries), rounded to 4 places."""
    n = len(scores)

    def mean(values: list[float]) -> float:
        return round(sum(values) / n, 4) if n else 0.0

    return MeanScores(
        queries=n,
        precision=mean([s.precision for s in scores]),
        recall=mean([s.recall for s in scores]),
        mrr=mean([s.reciprocal_rank for s in scores]),
        ndcg=mean([s.ndcg for s in scores]),
    )
