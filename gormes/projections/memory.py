"""The `memory` projection: the memory graph, folded from `memory.*` events.

    memory_entities(scope, entity_id, name, kind, aliases, first_seen, last_seen,
                    provenance_kind, origin, forgotten)                 pk (scope, entity_id)
    memory_relationships(relationship_id, scope, subject, predicate, object,
                    review_state, forgotten, <provenance columns>, evidence,
                    reviewer, review_note, reviewed_at, observations)
    memory_facts(fact_id, scope, text, subject, review_state, forgotten, stale,
                    superseded_by, <provenance columns>, observations)
    memory_facts_fts, memory_entities_fts   FTS5 (porter), kept in step by triggers

Provenance columns: origin_run, origin_turn, origin_artifact, extractor_version,
confidence, first_seen, last_seen, evidence_hash, provenance_kind, source_trust.

A repeat observation keeps `first_seen` and the first origin, moves `last_seen`,
keeps the highest confidence and counts `observations`. Review state: a trusted
observation upgrades `unreviewed` to `trusted`; a person's verdict (`promoted`,
`rejected`) is never overwritten by later observations. Forgetting is sticky;
forgetting an entity also forgets its relationships and the facts about it.
Every value comes from the events, so a rebuild gives identical tables.

SQLite only: lexical recall ranks with FTS5's bm25 over the `_fts` tables, which
PostgreSQL does not have. The projection has no portable `schema`, so the runner
refuses it on PostgreSQL, the daemon leaves it out there, and `gormes memory` and
`gormes recall` say so in one line (`require_sqlite`).
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import msgspec

from gormes.events.base import Recorded
from gormes.events.memory import (
    MemoryEntityObserved,
    MemoryFactRecorded,
    MemoryForgotten,
    MemoryRelationshipObserved,
    MemoryRelationshipReviewed,
    Provenance,
)

if TYPE_CHECKING:
    import sqlite_utils

ENTITIES = "memory_entities"
RELATIONSHIPS = "memory_relationships"
FACTS = "memory_facts"
FACTS_FTS = f"{FACTS}_fts"
ENTITIES_FTS = f"{ENTITIES}_fts"

_PROVENANCE_COLUMNS = {
    "origin_run": str, "origin_turn": str, "origin_artifact": str, "extractor_version": str,
    "confidence": float, "first_seen": float, "last_seen": float, "evidence_hash": str,
    "provenance_kind": str, "source_trust": str,
}
_PROVENANCE_NAMES = tuple(_PROVENANCE_COLUMNS)

# An observation's review state against the stored one: verdicts and trust stick.
_MERGE_STATE = (
    "CASE WHEN review_state = 'unreviewed' THEN excluded.review_state ELSE review_state END"
)
_MERGE_SEEN = (
    "first_seen = min(first_seen, excluded.first_seen), last_seen = max(last_seen, excluded.last_seen), "
    "confidence = max(confidence, excluded.confidence), observations = observations + 1"
)

_UPSERT_ENTITY = (
    f"INSERT INTO {ENTITIES}(scope, entity_id, name, kind, aliases, first_seen, last_seen, "
    "provenance_kind, origin, forgotten) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0) "
    "ON CONFLICT(scope, entity_id) DO UPDATE SET "
    "first_seen = min(first_seen, excluded.first_seen), last_seen = max(last_seen, excluded.last_seen), "
    "kind = CASE WHEN excluded.kind = 'thing' THEN kind ELSE excluded.kind END, "
    "aliases = CASE WHEN excluded.aliases = '[]' THEN aliases ELSE excluded.aliases END"
)
_UPSERT_RELATIONSHIP = (
    f"INSERT INTO {RELATIONSHIPS}(relationship_id, scope, subject, predicate, object, review_state, "
    f"forgotten, {', '.join(_PROVENANCE_NAMES)}, evidence, text, observations) "
    f"VALUES (?, ?, ?, ?, ?, ?, 0, {', '.join('?' * len(_PROVENANCE_NAMES))}, ?, ?, 1) "
    f"ON CONFLICT(relationship_id) DO UPDATE SET review_state = {_MERGE_STATE}, {_MERGE_SEEN}"
)
_UPSERT_FACT = (
    f"INSERT INTO {FACTS}(fact_id, scope, text, subject, review_state, forgotten, stale, "
    f"{', '.join(_PROVENANCE_NAMES)}, observations) "
    f"VALUES (?, ?, ?, ?, ?, 0, 0, {', '.join('?' * len(_PROVENANCE_NAMES))}, 1) "
    f"ON CONFLICT(fact_id) DO UPDATE SET review_state = {_MERGE_STATE}, {_MERGE_SEEN}"
)

_aliases_encoder = msgspec.json.Encoder()

SQLITE_ONLY = (
    "memory and recall run on SQLite only (recall ranks with SQLite's FTS5); "
    "give --db an SQLite file (docs/postgres.md)"
)


def require_sqlite(config: object) -> None:
    """Refuse a PostgreSQL `--db` (the CLI's Config) with one line, before anything
    is opened: without this a URL would be taken for an SQLite file name."""
    from gormes.errors import UserError

    if getattr(config, "url", None) is not None:
        raise UserError(SQLITE_ONLY)


def _provenance_values(p: Provenance) -> tuple[object, ...]:
    o = p.origin
    return (
        o.run_id, o.turn_id, o.artifact, p.extractor_version, p.confidence, p.first_seen,
        p.last_seen, p.evidence_hash, p.kind, p.source_trust,
    )


class MemoryProjection:
    name = "memory"
    version = 1
    tables = (FACTS_FTS, ENTITIES_FTS, ENTITIES, RELATIONSHIPS, FACTS)
    types = ("memory.*",)

    def setup(self, db: sqlite_utils.Database) -> None:
        entities = db.table(ENTITIES)
        entities.create(
            {
                "scope": str, "entity_id": str, "name": str, "kind": str, "aliases": str,
                "first_seen": float, "last_seen": float, "provenance_kind": str, "origin": str,
                "forgotten": int,
            },
            pk=("scope", "entity_id"), not_null={"name", "forgotten"}, if_not_exists=True,
        )
        entities.create_index(["entity_id"], if_not_exists=True)
        relationships = db.table(RELATIONSHIPS)
        relationships.create(
            {
                "relationship_id": str, "scope": str, "subject": str, "predicate": str, "object": str,
                "review_state": str, "forgotten": int, **_PROVENANCE_COLUMNS, "evidence": str, "text": str,
                "reviewer": str, "review_note": str, "reviewed_at": float, "observations": int,
            },
            pk="relationship_id", not_null={"scope", "subject", "predicate", "object", "review_state"},
            if_not_exists=True,
        )
        relationships.create_index(["subject"], if_not_exists=True)
        relationships.create_index(["object"], if_not_exists=True)
        relationships.create_index(["scope", "review_state"], if_not_exists=True)
        facts = db.table(FACTS)
        facts.create(
            {
                "fact_id": str, "scope": str, "text": str, "subject": str, "review_state": str,
                "forgotten": int, "stale": int, "superseded_by": str, **_PROVENANCE_COLUMNS,
                "observations": int,
            },
            pk="fact_id", not_null={"scope", "text", "review_state"}, if_not_exists=True,
        )
        facts.create_index(["subject"], if_not_exists=True)
        facts.create_index(["scope"], if_not_exists=True)
        if not db.table(FACTS_FTS).exists():
            facts.enable_fts(["text"], tokenize="porter", create_triggers=True)
        if not db.table(ENTITIES_FTS).exists():
            entities.enable_fts(["name", "aliases"], tokenize="porter", create_triggers=True)

    def apply(self, conn: sqlite3.Connection, records: list[Recorded]) -> None:
        for r in records:
            e = r.event
            if isinstance(e, MemoryEntityObserved):
                conn.execute(_UPSERT_ENTITY, (
                    e.scope, e.entity_id, e.name, e.kind, _aliases_encoder.encode(list(e.aliases)).decode(),
                    e.observed_at, e.observed_at, e.provenance_kind, e.origin.describe(),
                ))
            elif isinstance(e, MemoryRelationshipObserved):
                p = e.provenance
                conn.execute(_UPSERT_RELATIONSHIP, (
                    e.relationship_id, p.scope, e.subject, e.predicate, e.object, e.review_state,
                    *_provenance_values(p), e.evidence,
                    f"{e.subject_name or e.subject} {e.predicate} {e.object_name or e.object}",
                ))
            elif isinstance(e, MemoryFactRecorded):
                p = e.provenance
                conn.execute(_UPSERT_FACT, (
                    e.fact_id, p.scope, e.text, e.subject, e.review_state, *_provenance_values(p),
                ))
                for old in e.supersedes:
                    conn.execute(
                        f"UPDATE {FACTS} SET stale = 1, superseded_by = ? WHERE fact_id = ? AND fact_id != ?",
                        (e.fact_id, old, e.fact_id),
                    )
            elif isinstance(e, MemoryRelationshipReviewed):
                table, key = (FACTS, "fact_id") if e.target_kind == "fact" else (RELATIONSHIPS, "relationship_id")
                extra = "" if e.target_kind == "fact" else ", reviewer = ?, review_note = ?, reviewed_at = ?"
                params = () if e.target_kind == "fact" else (e.reviewer, e.note, e.reviewed_at)
                conn.execute(
                    f"UPDATE {table} SET review_state = ?{extra} WHERE {key} = ?",
                    (e.verdict, *params, e.target_id),
                )
            elif isinstance(e, MemoryForgotten):
                _forget(conn, e)


def _forget(conn: sqlite3.Connection, e: MemoryForgotten) -> None:
    if e.target_kind == "fact":
        conn.execute(f"UPDATE {FACTS} SET forgotten = 1 WHERE fact_id = ?", (e.target_id,))
    elif e.target_kind == "relationship":
        conn.execute(f"UPDATE {RELATIONSHIPS} SET forgotten = 1 WHERE relationship_id = ?", (e.target_id,))
    else:
        conn.execute(f"UPDATE {ENTITIES} SET forgotten = 1 WHERE scope = ? AND entity_id = ?", (e.scope, e.target_id))
        conn.execute(
            f"UPDATE {RELATIONSHIPS} SET forgotten = 1 WHERE scope = ? AND (subject = ? OR object = ?)",
            (e.scope, e.target_id, e.target_id),
        )
        conn.execute(f"UPDATE {FACTS} SET forgotten = 1 WHERE scope = ? AND subject = ?", (e.scope, e.target_id))


memory_projection = MemoryProjection()
