"""What the ranking modules work on: memory items read from the projection, and
one mode's scored hit. Plain data, no I/O."""

from __future__ import annotations

import msgspec

from gormes.recall.api import Why

STALE_FACTOR = 0.25  # a superseded fact still shows, well below what replaced it


class MemoryItem(msgspec.Struct, frozen=True, kw_only=True):
    """A fact or a relationship as recall sees it."""

    id: str
    kind: str  # "fact" | "relationship"
    text: str
    scope: str
    review_state: str
    last_seen: float
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    confidence: float = 1.0
    stale: bool = False
    provenance_kind: str = ""
    origin: str = ""


class ModeHit(msgspec.Struct, frozen=True, kw_only=True):
    item: MemoryItem
    score: float
    why: Why
    ranking: str | None = None  # lexical: the function behind the score (bm25, ts_rank_cd)


def stale_factor(item: MemoryItem) -> float:
    return STALE_FACTOR if item.stale else 1.0
