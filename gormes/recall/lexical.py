"""Lexical recall: full-text search over facts. The pure half: query terms, the
search expression, and turning scored rows into ranked hits.

SQLite: FTS5 (porter tokenizer) ranked by bm25. PostgreSQL: tsvector ('english'
config: Snowball stemming, the nearest to porter) ranked by ts_rank_cd. The
indexes are made by gormes/projections/memory.py; the SQL that reads them is in
gormes/recall/engine.py. Both get the same terms (stopwords dropped here), OR-ed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from gormes.recall.items import MemoryItem, ModeHit, stale_factor

_WORD = re.compile(r"\w+", re.UNICODE)

# Words that match nearly every fact and say nothing about what is wanted.
STOPWORDS: frozenset[str] = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from", "had", "has", "have", "how", "i", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "so", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "whom", "why", "will", "with", "you", "your"]
)


def words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def query_terms(query: str) -> tuple[str, ...]:
    """The distinct words of a query, stopwords dropped (all kept if that leaves none)."""
    seen: dict[str, None] = {}
    for word in words(query):
        seen.setdefault(word, None)
    terms = [w for w in seen if w not in STOPWORDS]
    return tuple(terms or seen)


def match_expression(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression: any of the terms, each quoted (no FTS syntax gets through)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def websearch_expression(terms: Sequence[str]) -> str:
    """The same for PostgreSQL's websearch_to_tsquery: any of the terms, each
    quoted. Terms are runs of word characters, so nothing else is syntax; and
    websearch_to_tsquery never raises on malformed input anyway."""
    return " or ".join('"' + t.replace('"', " ") + '"' for t in terms)


def matched_terms(terms: Iterable[str], text: str) -> tuple[str, ...]:
    """Which query terms the text contains, allowing for word endings (works ~ work)."""
    tokens = set(words(text))
    by_start: dict[str, list[str]] = {}  # a stem match shares its first three letters
    for token in tokens:
        if len(token) >= 3:
            by_start.setdefault(token[:3], []).append(token)
    found = []
    for term in terms:
        if term in tokens or any(_same_stem(term, token) for token in by_start.get(term[:3], ())):
            found.append(term)
    return tuple(found)


def _same_stem(a: str, b: str) -> bool:
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    return len(short) >= 3 and long_.startswith(short) and len(long_) - len(short) <= 3


def rank_lexical(
    rows: Sequence[tuple[MemoryItem, float]], terms: Sequence[str], ranking: str = "bm25",
) -> list[ModeHit]:
    """Rows of (item, score) -> hits, best first. The score is higher-is-better
    (the negated bm25 on SQLite, ts_rank_cd on PostgreSQL: `ranking` names which,
    and the hit says so); a stale fact's score is scaled down by `stale_factor`."""
    from gormes.recall.api import Why

    hits = []
    for item, raw in rows:
        score = raw * stale_factor(item)
        found = matched_terms(terms, item.text)
        reason = f"{ranking} match on {', '.join(found) or 'a stemmed term'}"
        if item.stale:
            reason += " (stale: superseded)"
        hits.append(ModeHit(item=item, score=score, ranking=ranking,
                            why=Why(mode="lexical", reason=reason, matched_terms=found)))
    hits.sort(key=lambda h: (-h.score, h.item.id))
    return hits
