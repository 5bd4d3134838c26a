"""Graph recall, the pure half: walk from seed entities and score what is reached.

Seeds are entities whose names match the query (their strength: bm25, scaled so
the best seed is 1). The walk follows relationships in either direction up to
`depth` hops. A path's strength is the seed's times, for each relationship on
it, HOP_DECAY x recency x confidence; recency halves every HALF_LIFE_S seconds
between the relationship's `last_seen` and the reference time. A relationship
scores the strength of the best path that walks it; a fact about a reached
entity scores that entity's best strength x FACT_WEIGHT x its own recency.

`edges_from` is given the entities of one level and returns the relationships
touching them that the caller may see (the privacy filter lives in that query,
so a walk never crosses into a scope it may not see).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import NamedTuple

import msgspec

from gormes.recall.api import PathStep, Why
from gormes.recall.items import MemoryItem, ModeHit, stale_factor

HOP_DECAY = 0.7
FACT_WEIGHT = 0.9
HALF_LIFE_S = 30 * 86400.0
MAX_FRONTIER = 500


class Seed(msgspec.Struct, frozen=True, kw_only=True):
    entity_id: str
    name: str
    strength: float  # 0 < strength <= 1
    matched: tuple[str, ...] = ()


class Reach(msgspec.Struct, frozen=True, kw_only=True):
    entity_id: str
    seed: Seed
    depth: int
    strength: float
    path: tuple[MemoryItem, ...]


class Scored(NamedTuple):
    """A reached item before its explanation is written (only the top k get one)."""

    score: float
    item: MemoryItem
    via: Reach
    what: str


def seeds_from_matches(matches: Sequence[tuple[str, str, float]], terms: Sequence[str]) -> list[Seed]:
    """(entity id, name, score) rows -> seeds, strongest first, one per entity
    (score: higher is better, the negated bm25 or ts_rank_cd)."""
    from gormes.recall.lexical import matched_terms

    best: dict[str, tuple[str, float]] = {}
    for entity, name, score in matches:
        if entity not in best or score > best[entity][1]:
            best[entity] = (name, score)
    if not best:
        return []
    top = max(score for _, score in best.values()) or 1.0
    seeds = [
        Seed(entity_id=e, name=n, strength=max(s / top, 1e-6) if top > 0 else 1.0, matched=matched_terms(terms, n))
        for e, (n, s) in best.items()
    ]
    seeds.sort(key=lambda s: (-s.strength, s.entity_id))
    return seeds


def recency(last_seen: float, reference: float) -> float:
    return 0.5 ** (max(0.0, reference - last_seen) / HALF_LIFE_S)


def collect_edges(
    seeds: Sequence[Seed], edges_from: Callable[[Collection[str]], Sequence[MemoryItem]], depth: int,
) -> list[list[MemoryItem]]:
    """The relationships of each level of the walk (level 1 touches the seeds)."""
    seen = {s.entity_id for s in seeds}
    frontier = sorted(seen)
    levels: list[list[MemoryItem]] = []
    walked: set[str] = set()
    for _ in range(depth):
        if not frontier:
            break
        edges = [e for e in edges_from(frontier[:MAX_FRONTIER]) if e.id not in walked]
        walked.update(e.id for e in edges)
        levels.append(edges)
        nxt = {end for e in edges for end in (e.subject, e.object) if end is not None and end not in seen}
        seen.update(nxt)
        frontier = sorted(nxt)
    return levels


def walk(seeds: Sequence[Seed], levels: Sequence[Sequence[MemoryItem]], reference: float) -> tuple[dict[str, Reach], list[Scored]]:
    """Best reach of every entity, and a hit for every relationship walked."""
    reach = {s.entity_id: Reach(entity_id=s.entity_id, seed=s, depth=0, strength=s.strength, path=()) for s in seeds}
    edge_hits: dict[str, tuple[float, Reach, MemoryItem]] = {}
    for level, edges in enumerate(levels, start=1):
        new: dict[str, Reach] = {}
        for edge in edges:
            weight = HOP_DECAY * recency(edge.last_seen, reference) * edge.confidence
            for here, there in ((edge.subject, edge.object), (edge.object, edge.subject)):
                origin = reach.get(here or "")
                if origin is None or origin.depth != level - 1:
                    continue
                strength = origin.strength * weight
                via = Reach(entity_id=there or "", seed=origin.seed, depth=level, strength=strength,
                            path=(*origin.path, edge))
                best = edge_hits.get(edge.id)
                if best is None or strength > best[0]:
                    edge_hits[edge.id] = (strength, via, edge)
                if there and there not in reach and (there not in new or strength > new[there].strength):
                    new[there] = via
        reach.update(new)
    hits = [Scored(strength, edge, via, f"relationship {via.depth} hop(s) from seed") for strength, via, edge in edge_hits.values()]
    return reach, hits


def score_facts(facts: Sequence[MemoryItem], reach: dict[str, Reach], reference: float) -> list[Scored]:
    hits = []
    for fact in facts:
        via = reach.get(fact.subject or "")
        if via is None:
            continue
        score = via.strength * FACT_WEIGHT * recency(fact.last_seen, reference) * stale_factor(fact)
        what = "a fact about the seed" if via.depth == 0 else f"a fact about an entity {via.depth} hop(s) from seed"
        hits.append(Scored(score, fact, via, what + (" (stale: superseded)" if fact.stale else "")))
    return hits


def rank_graph(edge_hits: list[Scored], fact_hits: list[Scored], limit: int) -> list[ModeHit]:
    """The best `limit` items, best first (ties by id), each with its reason and path."""
    best = sorted(edge_hits + fact_hits, key=lambda h: (-h.score, h.item.id))[:limit]
    return [ModeHit(item=h.item, score=h.score, why=_why(h.via, h.what)) for h in best]


def reference_time(now: float | None, items: Sequence[MemoryItem]) -> float:
    """`now` when given, else the newest `last_seen` among the items (clock-free)."""
    if now is not None:
        return now
    return max((i.last_seen for i in items), default=0.0)


def _why(via: Reach, what: str) -> Why:
    steps = tuple(
        PathStep(relationship_id=e.id, subject=e.subject or "", predicate=e.predicate or "", object=e.object or "", scope=e.scope)
        for e in via.path
    )
    route = " ".join(
        [via.seed.entity_id] + [f"-[{e.predicate}]- {_other(e, prev)}" for prev, e in _pairs(via)]
    )
    matched = f" (matched {', '.join(via.seed.matched)})" if via.seed.matched else ""
    return Why(
        mode="graph", reason=f"{what} {via.seed.name!r}{matched}; path: {route}",
        matched_terms=via.seed.matched, seed=via.seed.entity_id, seed_name=via.seed.name, path=steps, depth=via.depth,
    )


def _pairs(via: Reach) -> list[tuple[str, MemoryItem]]:
    out, at = [], via.seed.entity_id
    for edge in via.path:
        out.append((at, edge))
        at = _other(edge, at)
    return out


def _other(edge: MemoryItem, here: str) -> str:
    return (edge.object if edge.subject == here else edge.subject) or ""
