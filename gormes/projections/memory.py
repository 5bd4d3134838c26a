"""The `memory` projection: the memory graph, folded from `memory.*` events of
`memory-<scope>` streams (an event on another stream is not folded: decision 0086).

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

Both databases: the tables are described once (`SCHEMA`) and written with one
SQL text (`upserts`: only SQLite's scalar min/max become least/greatest). Full-text
search differs: on SQLite, FTS5 tables (porter) kept in step by triggers; on
PostgreSQL, GIN indexes over `to_tsvector('english', ...)` of the same text (no
extra tables or columns, so a rebuild gives the same rows on both).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from gormes.events.base import Recorded
from gormes.events.postgres_sql import POSTGRES, dialect_of
from gormes.events.memory import (
    MemoryEntityObserved,
    MemoryFactRecorded,
    MemoryForgotten,
    MemoryRelationshipObserved,
    MemoryRelationshipReviewed,
    Provenance,
    memory_stream,
)
from gormes.projections.schema import Index, Schema, Table

if TYPE_CHECKING:
    import sqlite_utils

    from gormes.events.store import EventLog

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

# -- full-text search on PostgreSQL ------------------------------------------------------
# The same text FTS5 indexes, as an expression (GIN index) rather than a column, so
# the tables hold the same rows on both databases. Recall's queries repeat these
# expressions exactly, or PostgreSQL would not use the index (gormes/recall/engine.py).
TS_CONFIG = "english"  # Snowball English stemming, as FTS5's porter tokenizer stems
FACTS_TSV = f"to_tsvector('{TS_CONFIG}', {{alias}}text)"
ENTITIES_TSV = f"to_tsvector('{TS_CONFIG}', {{alias}}name || ' ' || coalesce({{alias}}aliases, ''))"
FACTS_TSV_INDEX = "idx_memory_facts_tsv"
ENTITIES_TSV_INDEX = "idx_memory_entities_tsv"

SCHEMA = Schema(
    tables=(
        Table(
            ENTITIES,
            {
                "scope": str, "entity_id": str, "name": str, "kind": str, "aliases": str,
                "first_seen": float, "last_seen": float, "provenance_kind": str, "origin": str,
                "forgotten": int,
            },
            ("scope", "entity_id"), frozenset({"name", "forgotten"}),
        ),
        Table(
            RELATIONSHIPS,
            {
                "relationship_id": str, "scope": str, "subject": str, "predicate": str, "object": str,
                "review_state": str, "forgotten": int, **_PROVENANCE_COLUMNS, "evidence": str, "text": str,
                "reviewer": str, "review_note": str, "reviewed_at": float, "observations": int,
            },
            "relationship_id", frozenset({"scope", "subject", "predicate", "object", "review_state"}),
        ),
        Table(
            FACTS,
            {
                "fact_id": str, "scope": str, "text": str, "subject": str, "review_state": str,
                "forgotten": int, "stale": int, "superseded_by": str, **_PROVENANCE_COLUMNS,
                "observations": int,
            },
            "fact_id", frozenset({"scope", "text", "review_state"}),
        ),
    ),
    indexes=(
        Index(ENTITIES, ("entity_id",)),
        Index(RELATIONSHIPS, ("subject",)),
        Index(RELATIONSHIPS, ("object",)),
        Index(RELATIONSHIPS, ("scope", "review_state")),
        Index(FACTS, ("subject",)),
        Index(FACTS, ("scope",)),
        # `held_by`: what a trust class holds, read from the index alone.
        Index(FACTS, ("source_trust", "forgotten", "observations")),
        Index(RELATIONSHIPS, ("source_trust", "forgotten", "observations")),
    ),
    postgres_extra=(
        (FACTS_TSV_INDEX,
         f"CREATE INDEX IF NOT EXISTS {FACTS_TSV_INDEX} ON {FACTS} USING GIN ({FACTS_TSV.format(alias='')})"),
        (ENTITIES_TSV_INDEX,
         f"CREATE INDEX IF NOT EXISTS {ENTITIES_TSV_INDEX} ON {ENTITIES} "
         f"USING GIN ({ENTITIES_TSV.format(alias='')})"),
    ),
)


# An observation's review state against the stored one: verdicts and trust stick.
def _merge_state(table: str) -> str:
    return (
        f"CASE WHEN {table}.review_state = 'unreviewed' THEN excluded.review_state "
        f"ELSE {table}.review_state END"
    )


def _merge_times(table: str, dialect: str) -> str:
    """Keep the earliest first_seen and the latest last_seen: SQLite's scalar
    two-argument min/max are PostgreSQL's least/greatest."""
    lo, hi = ("least", "greatest") if dialect == POSTGRES else ("min", "max")
    return (
        f"first_seen = {lo}({table}.first_seen, excluded.first_seen), "
        f"last_seen = {hi}({table}.last_seen, excluded.last_seen)"
    )


def _merge_seen(table: str, dialect: str) -> str:
    hi = "greatest" if dialect == POSTGRES else "max"
    return (
        f"{_merge_times(table, dialect)}, confidence = {hi}({table}.confidence, excluded.confidence), "
        f"observations = {table}.observations + 1"
    )


@functools.cache
def upserts(dialect: str) -> tuple[str, str, str]:
    """The entity, relationship and fact upserts: one text, but for min/max."""
    entity = (
        f"INSERT INTO {ENTITIES}(scope, entity_id, name, kind, aliases, first_seen, last_seen, "
        "provenance_kind, origin, forgotten) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0) "
        f"ON CONFLICT(scope, entity_id) DO UPDATE SET {_merge_times(ENTITIES, dialect)}, "
        f"kind = CASE WHEN excluded.kind = 'thing' THEN {ENTITIES}.kind ELSE excluded.kind END, "
        f"aliases = CASE WHEN excluded.aliases = '[]' THEN {ENTITIES}.aliases ELSE excluded.aliases END"
    )
    relationship = (
        f"INSERT INTO {RELATIONSHIPS}(relationship_id, scope, subject, predicate, object, review_state, "
        f"forgotten, {', '.join(_PROVENANCE_NAMES)}, evidence, text, observations) "
        f"VALUES (?, ?, ?, ?, ?, ?, 0, {', '.join('?' * len(_PROVENANCE_NAMES))}, ?, ?, 1) "
        f"ON CONFLICT(relationship_id) DO UPDATE SET review_state = {_merge_state(RELATIONSHIPS)}, "
        f"{_merge_seen(RELATIONSHIPS, dialect)}"
    )
    fact = (
        f"INSERT INTO {FACTS}(fact_id, scope, text, subject, review_state, forgotten, stale, "
        f"{', '.join(_PROVENANCE_NAMES)}, observations) "
        f"VALUES (?, ?, ?, ?, ?, 0, 0, {', '.join('?' * len(_PROVENANCE_NAMES))}, 1) "
        f"ON CONFLICT(fact_id) DO UPDATE SET review_state = {_merge_state(FACTS)}, "
        f"{_merge_seen(FACTS, dialect)}"
    )
    return entity, relationship, fact

_aliases_encoder = msgspec.json.Encoder()

def read_connection(log: EventLog) -> sqlite3.Connection:
    """What memory's readers (recall, mirror, find_target) take from a store's
    `read_with` log: `log.sql`, the connection `?` SQL runs on (a PortableConnection
    on PostgreSQL); `store.read_sql` hands it over directly."""
    return log.sql  # type: ignore[no-any-return]


def held_by(conn: sqlite3.Connection, trust: str) -> int:
    """How much memory the `trust` class holds: the observations of the facts and
    relationships recorded from its text and not forgotten (a repeat is another
    event in the log, so it counts again). Read from the `source_trust` indexes, it
    costs the rows it counts."""
    return sum(
        int(conn.execute(
            f"SELECT coalesce(sum(observations), 0) FROM {table} WHERE source_trust = ? AND forgotten = 0",
            (trust,),
        ).fetchone()[0])
        for table in (FACTS, RELATIONSHIPS)
    )


def recorded_from(conn: sqlite3.Connection, fact_ids: Sequence[str],
                  relationship_ids: Sequence[str]) -> dict[str, tuple[str | None, bool]]:
    """For those of these facts and relationships the graph holds (looked up by key):
    the class of the text each was first recorded from, and whether it is forgotten."""
    found: dict[str, tuple[str | None, bool]] = {}
    for table, key, ids in ((FACTS, "fact_id", fact_ids), (RELATIONSHIPS, "relationship_id", relationship_ids)):
        for item in ids:
            row = conn.execute(f"SELECT source_trust, forgotten FROM {table} WHERE {key} = ?", (item,)).fetchone()
            if row is not None:
                found[item] = (row[0], bool(row[1]))
    return found


def _provenance_values(p: Provenance) -> tuple[object, ...]:
    o = p.origin
    return (
        o.run_id, o.turn_id, o.artifact, p.extractor_version, p.confidence, p.first_seen,
        p.last_seen, p.evidence_hash, p.kind, p.source_trust,
    )


MEMORY_STREAM_PREFIX = memory_stream("")


class MemoryProjection:
    """Folds `memory.*` events of `memory-<scope>` streams only: one on another
    stream (an older gormes imported it; decision 0086) passed none of the
    import's checks on memory claims, and is not believed."""

    name = "memory"
    version = 2  # 2: only memory-<scope> streams
    tables = (FACTS_FTS, ENTITIES_FTS, ENTITIES, RELATIONSHIPS, FACTS)
    types = ("memory.*",)
    schema = SCHEMA  # on PostgreSQL: its tables plus the GIN indexes (no _fts tables)

    def setup(self, db: sqlite_utils.Database) -> None:
        SCHEMA.create_sqlite(db)
        facts, entities = db.table(FACTS), db.table(ENTITIES)
        if not db.table(FACTS_FTS).exists():
            facts.enable_fts(["text"], tokenize="porter", create_triggers=True)
        if not db.table(ENTITIES_FTS).exists():
            entities.enable_fts(["name", "aliases"], tokenize="porter", create_triggers=True)

    def apply(self, conn: sqlite3.Connection, records: list[Recorded]) -> None:
        upsert_entity, upsert_relationship, upsert_fact = upserts(dialect_of(conn))
        for r in records:
            if not r.stream.startswith(MEMORY_STREAM_PREFIX):
                continue
            e = r.event
            if isinstance(e, MemoryEntityObserved):
                conn.execute(upsert_entity, (
                    e.scope, e.entity_id, e.name, e.kind, _aliases_encoder.encode(list(e.aliases)).decode(),
                    e.observed_at, e.observed_at, e.provenance_kind, e.origin.describe(),
                ))
            elif isinstance(e, MemoryRelationshipObserved):
                p = e.provenance
                conn.execute(upsert_relationship, (
                    e.relationship_id, p.scope, e.subject, e.predicate, e.object, e.review_state,
                    *_provenance_values(p), e.evidence,
                    f"{e.subject_name or e.subject} {e.predicate} {e.object_name or e.object}",
                ))
            elif isinstance(e, MemoryFactRecorded):
                p = e.provenance
                conn.execute(upsert_fact, (
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


# Forgetting erases (decision 0026): the observations of what was forgotten are
# redacted, so their rows are not folded at all. The forget itself leaves a row of
# the id alone, text empty and forgotten, so a later observation of the same id
# stays forgotten (its upsert changes neither `forgotten` nor the text).
_FORGET_FACT = (
    f"INSERT INTO {FACTS}(fact_id, scope, text, review_state, forgotten, stale, observations) "
    "VALUES (?, ?, '', 'unreviewed', 1, 0, 0) ON CONFLICT(fact_id) DO UPDATE SET forgotten = 1"
)
_FORGET_RELATIONSHIP = (
    f"INSERT INTO {RELATIONSHIPS}(relationship_id, scope, subject, predicate, object, review_state, "
    "forgotten, evidence, text, observations) VALUES (?, ?, '', '', '', 'unreviewed', 1, '', '', 0) "
    "ON CONFLICT(relationship_id) DO UPDATE SET forgotten = 1"
)
_FORGET_ENTITY = (
    f"INSERT INTO {ENTITIES}(scope, entity_id, name, kind, aliases, forgotten) VALUES (?, ?, '', 'thing', '[]', 1) "
    "ON CONFLICT(scope, entity_id) DO UPDATE SET forgotten = 1"
)


def _forget(conn: sqlite3.Connection, e: MemoryForgotten) -> None:
    if e.target_kind == "fact":
        conn.execute(_FORGET_FACT, (e.target_id, e.scope))
    elif e.target_kind == "relationship":
        conn.execute(_FORGET_RELATIONSHIP, (e.target_id, e.scope))
    else:
        conn.execute(_FORGET_ENTITY, (e.scope, e.target_id))
        conn.execute(
            f"UPDATE {RELATIONSHIPS} SET forgotten = 1 WHERE scope = ? AND (subject = ? OR object = ?)",
            (e.scope, e.target_id, e.target_id),
        )
        conn.execute(f"UPDATE {FACTS} SET forgotten = 1 WHERE scope = ? AND subject = ?", (e.scope, e.target_id))


memory_projection = MemoryProjection()
