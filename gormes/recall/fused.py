"""Fused recall: weighted reciprocal-rank fusion of the modes that ran. Pure.

fused(item) = sum over modes of WEIGHT[mode] / (RRF_K + rank in that mode). Ranks
need no calibration between bm25, path strength and cosine similarity, which live
on different scales; an item found by several modes rises above one found by one.

The constants were tuned on the shipped recall fixtures (a grid over RRF_K 1-60,
graph 0-1, semantic 0.5-3; docs/decisions/0036-fused-recall-weights.md): plain RRF
(k=60, equal weights) let the graph walk, the weakest mode, pull its guesses up
among the top hits and fell below the best single mode. With a small RRF_K a
mode's first hits dominate, and the graph's low weight makes it fill the places
the text modes leave empty (its multi-hop finds) without displacing their firsts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from gormes.recall.api import ModeScore, ScoreBreakdown, Why
from gormes.recall.items import MemoryItem, ModeHit

RRF_K = 1
WEIGHTS = {"lexical": 1.0, "semantic": 2.0, "graph": 0.15}


class Ranked(msgspec.Struct, frozen=True, kw_only=True):
    """An item with its score in every mode that found it, and every mode's reason."""

    item: MemoryItem
    score: float
    scores: ScoreBreakdown
    why: tuple[Why, ...]


def breakdown(per_mode: Mapping[str, ModeScore], fused: ModeScore | None = None) -> ScoreBreakdown:
    return ScoreBreakdown(
        lexical=per_mode.get("lexical"), graph=per_mode.get("graph"), semantic=per_mode.get("semantic"), fused=fused,
    )


def single(hits: Sequence[ModeHit], mode: str) -> list[Ranked]:
    """One mode's hits as results, ranks as given."""
    return [
        Ranked(item=h.item, score=h.score, scores=breakdown({mode: ModeScore(score=h.score, rank=rank, ranking=h.ranking)}), why=(h.why,))
        for rank, h in enumerate(hits, start=1)
    ]


def fuse(
    lists: Mapping[str, Sequence[ModeHit]], *, rrf_k: int = RRF_K, weights: Mapping[str, float] = WEIGHTS,
) -> list[Ranked]:
    """Weighted reciprocal-rank fusion; ties broken by item id, so the order is stable."""
    items: dict[str, MemoryItem] = {}
    per_mode: dict[str, dict[str, ModeScore]] = {}
    whys: dict[str, list[Why]] = {}
    totals: dict[str, float] = {}
    for mode, hits in lists.items():
        for rank, hit in enumerate(hits, start=1):
            key = hit.item.id
            items.setdefault(key, hit.item)
            per_mode.setdefault(key, {})[mode] = ModeScore(score=hit.score, rank=rank, ranking=hit.ranking)
            whys.setdefault(key, []).append(hit.why)
            totals[key] = totals.get(key, 0.0) + weights.get(mode, 1.0) / (rrf_k + rank)
    order = sorted(totals, key=lambda key: (-totals[key], key))
    return [
        Ranked(
            item=items[key], score=totals[key],
            scores=breakdown(per_mode[key], ModeScore(score=totals[key], rank=rank)), why=tuple(whys[key]),
        )
        for rank, key in enumerate(order, start=1)
    ]
