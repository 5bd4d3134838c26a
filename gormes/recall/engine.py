"""Reads memory rows for the ranking modules and assembles `RecallResult`s.

All SQL of recall lives here; every query carries the visibility filter
(`visible`), so privacy does not depend on the ranking code.

One SQL text for both databases (`?` placeholders; on PostgreSQL `conn` is a
PortableConnection), except full-text search: on SQLite, FTS5 `MATCH` ranked by
bm25; on PostgreSQL, `@@` against the GIN-indexed `to_tsvector('english', ...)`
expressions of gormes/projections/memory.py, ranked by ts_rank_cd, the query made
by `websearch_to_tsquery` from the same quoted terms (it never raises on any text).
The two rankings are different numbers; each hit's lexical score names its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence

from gormes.events.postgres_sql import POSTGRES, dialect_of
from gormes.projections.memory import (
    ENTITIES,
    ENTITIES_FTS,
    ENTITIES_TSV,
    FACTS,
    FACTS_FTS,
    FACTS_TSV,
    RELATIONSHIPS,
    TS_CONFIG,
)
from gormes.recall import graph, lexical, semantic
from gormes.recall.api import (
    GRAPH_DEPTH,
    ModeStatus,
    RecallError,
    RecallHit,
    RecallResult,
)
from gormes.recall.fused import Ranked, fuse, single
from gormes.recall.items import MemoryItem, ModeHit

CANDIDATES_PER_K = 4  # each mode returns k x this before fusion
SEED_LIMIT = 10

_FACT_COLUMNS = (
    "f.fact_id, f.scope, f.text, f.subject, f.review_state, f.last_seen, f.confidence, f.stale, "
    "f.provenance_kind, f.origin_run, f.origin_turn, f.origin_artifact"
)
_EDGE_COLUMNS = (
    "r.relationship_id, r.scope, r.text, r.subject, r.review_state, r.last_seen, r.confidence, 0, "
    "r.provenance_kind, r.origin_run, r.origin_turn, r.origin_artifact, r.predicate, r.object"
)


LEXICAL_RANKING = {"sqlite": "bm25", POSTGRES: "ts_rank_cd"}  # what a lexical score is


def visible(alias: str, scope: str, cross_scope: bool, dialect: str = "sqlite") -> tuple[str, tuple[str, ...]]:
    """SQL (and params) for what a query in `scope` may see of a fact or relationship:
    never forgotten or rejected items; in its own scope, anything else; in other
    scopes (cross-scope only), trusted and promoted items only."""
    # Unary `+` keeps SQLite from choosing the scope index over the subject/object
    # ones: a scope holds everything, an entity's edges are few. (PostgreSQL has no
    # unary `+` on text, and its planner weighs the indexes by statistics.)
    c = f"{alias}." if dialect == POSTGRES else f"+{alias}."
    own = f"({c}scope = ? AND {c}review_state != 'rejected')"
    if cross_scope:
        return f"{c}forgotten = 0 AND ({own} OR {c}review_state IN ('trusted', 'promoted'))", (scope,)
    return f"{c}forgotten = 0 AND {own}", (scope,)


def _origin(run: str | None, turn: str | None, artifact: str | None) -> str:
    if run:
        return f"run {run}" + (f" turn {turn}" if turn else "")
    return f"artifact {artifact}" if artifact else ""


def _item(row: Sequence[object], kind: str) -> MemoryItem:
    return MemoryItem(
        id=row[0], kind=kind, scope=row[1], text=row[2], subject=row[3], review_state=row[4],  # type: ignore[arg-type]
        last_seen=row[5] or 0.0, confidence=1.0 if row[6] is None else row[6], stale=bool(row[7]),  # type: ignore[arg-type]
        provenance_kind=row[8] or "", origin=_origin(row[9], row[10], row[11]),  # type: ignore[arg-type]
        predicate=row[12] if kind == "relationship" else None,  # type: ignore[arg-type]
        object=row[13] if kind == "relationship" else None,  # type: ignore[arg-type]
    )


# -- modes -------------------------------------------------------------------------------


def lexical_hits(conn: sqlite3.Connection, terms: Sequence[str], scope: str, cross: bool, limit: int) -> list[ModeHit]:
    dialect = dialect_of(conn)
    where, params = visible("f", scope, cross, dialect)
    if dialect == POSTGRES:
        tsv = FACTS_TSV.format(alias="f.")
        rows = conn.execute(
            f"SELECT {_FACT_COLUMNS}, ts_rank_cd({tsv}, q) AS rank "
            f"FROM {FACTS} f, websearch_to_tsquery('{TS_CONFIG}', ?) q "
            f"WHERE {tsv} @@ q AND {where} ORDER BY rank DESC, f.fact_id LIMIT ?",
            (lexical.websearch_expression(terms), *params, limit),
        ).fetchall()
        scored = [(_item(r, "fact"), r[-1]) for r in rows]
    else:
        # FTS5's `rank` is bm25() (the memory projection configures no other); ordered
        # by it, FTS5 hands the matches over best first, so the join reads facts only
        # until the limit is reached, instead of all of them for a sort afterwards.
        rows = conn.execute(
            f"SELECT {_FACT_COLUMNS}, {FACTS_FTS}.rank FROM {FACTS_FTS} JOIN {FACTS} f ON f.rowid = {FACTS_FTS}.rowid "
            f"WHERE {FACTS_FTS} MATCH ? AND {where} ORDER BY {FACTS_FTS}.rank LIMIT ?",
            (lexical.match_expression(terms), *params, limit),
        ).fetchall()
        scored = [(_item(r, "fact"), -r[-1]) for r in rows]  # bm25: lower is better
    return lexical.rank_lexical(scored, terms, LEXICAL_RANKING[dialect])[:limit]


def _seeds(conn: sqlite3.Connection, terms: Sequence[str], scope: str, cross: bool) -> list[graph.Seed]:
    where = "e.forgotten = 0" + ("" if cross else " AND e.scope = ?")
    params = (() if cross else (scope,))
    if dialect_of(conn) == POSTGRES:
        tsv = ENTITIES_TSV.format(alias="e.")
        rows = conn.execute(
            f"SELECT e.entity_id, e.name, ts_rank_cd({tsv}, q) AS rank "
            f"FROM {ENTITIES} e, websearch_to_tsquery('{TS_CONFIG}', ?) q "
            f"WHERE {tsv} @@ q AND {where} ORDER BY rank DESC, e.entity_id LIMIT ?",
            (lexical.websearch_expression(terms), *params, SEED_LIMIT * 4),
        ).fetchall()
    else:
        rows = [(e, n, -bm25) for e, n, bm25 in conn.execute(
            f"SELECT e.entity_id, e.name, bm25({ENTITIES_FTS}) FROM {ENTITIES_FTS} "
            f"JOIN {ENTITIES} e ON e.rowid = {ENTITIES_FTS}.rowid "
            f"WHERE {ENTITIES_FTS} MATCH ? AND {where} ORDER BY bm25({ENTITIES_FTS}) LIMIT ?",
            (lexical.match_expression(terms), *params, SEED_LIMIT * 4),
        )]
    return graph.seeds_from_matches(rows, terms)[:SEED_LIMIT]


def graph_hits(conn: sqlite3.Connection, terms: Sequence[str], scope: str, cross: bool, limit: int,
               now: float | None) -> list[ModeHit]:
    seeds = _seeds(conn, terms, scope, cross)
    if not seeds:
        return []
    where, params = visible("r", scope, cross, dialect_of(conn))

    def edges_from(entities: Collection[str]) -> list[MemoryItem]:
        marks = ", ".join("?" * len(entities))
        rows = conn.execute(
            f"SELECT {_EDGE_COLUMNS} FROM {RELATIONSHIPS} r WHERE r.subject IN ({marks}) AND {where} "
            f"UNION SELECT {_EDGE_COLUMNS} FROM {RELATIONSHIPS} r WHERE r.object IN ({marks}) AND {where}",
            (*entities, *params, *entities, *params),
        ).fetchall()
        return [_item(r, "relationship") for r in rows]

    levels = graph.collect_edges(seeds, edges_from, GRAPH_DEPTH)
    entities = sorted({s.entity_id for s in seeds} | {end for lvl in levels for e in lvl for end in (e.subject, e.object) if end})
    facts = _facts_about(conn, entities, scope, cross)
    reference = graph.reference_time(now, [e for lvl in levels for e in lvl] + facts)
    reach, edge_hits = graph.walk(seeds, levels, reference)
    return graph.rank_graph(edge_hits, graph.score_facts(facts, reach, reference), limit)


def _facts_about(conn: sqlite3.Connection, entities: Sequence[str], scope: str, cross: bool) -> list[MemoryItem]:
    where, params = visible("f", scope, cross, dialect_of(conn))
    out: list[MemoryItem] = []
    for start in range(0, len(entities), 500):
        chunk = entities[start:start + 500]
        rows = conn.execute(
            f"SELECT {_FACT_COLUMNS} FROM {FACTS} f WHERE f.subject IN ({', '.join('?' * len(chunk))}) AND {where}",
            (*chunk, *params),
        ).fetchall()
        out.extend(_item(r, "fact") for r in rows)
    return out


def semantic_hits(conn: sqlite3.Connection, query: str, scope: str, cross: bool, limit: int) -> list[ModeHit] | None:
    fwhere, fparams = visible("f", scope, cross, dialect_of(conn))
    rwhere, rparams = visible("r", scope, cross, dialect_of(conn))
    items = [_item(r, "fact") for r in conn.execute(
        f"SELECT {_FACT_COLUMNS} FROM {FACTS} f WHERE {fwhere} ORDER BY f.fact_id LIMIT ?", (*fparams, semantic.MAX_CANDIDATES),
    )]
    items += [_item(r, "relationship") for r in conn.execute(
        f"SELECT {_EDGE_COLUMNS} FROM {RELATIONSHIPS} r WHERE {rwhere} ORDER BY r.relationship_id LIMIT ?",
        (*rparams, semantic.MAX_CANDIDATES),
    )]
    vectors = semantic.embed([query, *(i.text for i in items)])
    if vectors is None:
        return None
    return semantic.rank_semantic(vectors[0], list(zip(items, vectors[1:], strict=True)))[:limit]


# -- assembly ------------------------------------------------------------------------------


def run_recall(
    conn: sqlite3.Connection, query: str, *, mode: str, k: int, scope: str, cross_scope: bool,
    now: float | None,
) -> RecallResult:
    terms = lexical.query_terms(query)
    limit = k * CANDIDATES_PER_K if mode == "fused" else k
    wanted = ("lexical", "graph", "semantic") if mode == "fused" else (mode,)
    lists: dict[str, list[ModeHit]] = {}
    statuses: list[ModeStatus] = []
    try:
        for m in wanted:
            if m == "lexical":
                lists[m] = lexical_hits(conn, terms, scope, cross_scope, limit)
            elif m == "graph":
                lists[m] = graph_hits(conn, terms, scope, cross_scope, limit, now)
            else:
                status = semantic.semantic_status()
                hits = semantic_hits(conn, query, scope, cross_scope, limit) if status.enabled else None
                if hits is None:
                    status = semantic.semantic_status()  # a failed load says why
                    if status.enabled:
                        status = ModeStatus(mode="semantic", enabled=False, reason="the embedding model is unavailable")
                    statuses.append(status)
                    continue
                lists[m] = hits
            statuses.append(ModeStatus(mode=m, enabled=True))
    except Exception as exc:  # sqlite3.OperationalError, psycopg's UndefinedTable
        if "no such table" in str(exc) or type(exc).__name__ == "UndefinedTable":
            raise RecallError("recall: this database has no memory yet (the memory projection is not built)") from None
        raise
    ranked = fuse(lists) if mode == "fused" else single(lists.get(mode, []), mode)
    notes = tuple(f"{s.mode}: disabled, {s.reason}" for s in statuses if not s.enabled)
    return RecallResult(
        query=query, mode=mode, k=k, scope=scope, cross_scope=cross_scope,
        scopes=("*",) if cross_scope else (scope,), hits=tuple(_hit(r) for r in ranked[:k]),
        modes=tuple(statuses), notes=notes,
    )


def _hit(r: Ranked) -> RecallHit:
    item = r.item
    return RecallHit(
        id=item.id, kind=item.kind, text=item.text, scope=item.scope, review_state=item.review_state,  # type: ignore[arg-type]
        score=r.score, scores=r.scores, why=r.why, subject=item.subject, last_seen=item.last_seen,
        stale=item.stale, provenance_kind=item.provenance_kind, origin=item.origin,
    )
