"""The memory projection: provenance on every edge, merges, rebuild identity."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gormes.events.memory import MemoryRelationshipObserved, Origin
from gormes.memory.writer import MemoryWriter, Source, find_target
from gormes.projections.memory import (
    ENTITIES,
    FACTS,
    FACTS_FTS,
    RELATIONSHIPS,
    memory_projection,
)
from gormes.projections.runner import ProjectionRunner

MANUAL = Source(origin=Origin(artifact="cli"))
GATEWAY = Source(origin=Origin(run_id="run-1", turn_id="seq:2"), kind="extracted", trust="gateway",
                 extractor_version="memory-extractor/1", confidence=0.6, evidence="Ada said she owes Bob")


def ticking(start: float = 1_700_000_000.0):
    now = [start]

    def clock() -> float:
        now[0] += 60.0
        return now[0]

    return clock


async def seed(store) -> MemoryWriter:
    writer = MemoryWriter(store, clock=ticking())
    await writer.relate("chat:a", "Ada Lovelace", "works at", "Acme", Source(origin=Origin(artifact="notes/ada.md"), kind="imported"))
    await writer.relate("chat:a", "Acme", "located in", "London", MANUAL)
    await writer.relate("chat:a", "Ada Lovelace", "works at", "Acme", MANUAL)  # seen again
    await writer.relate("chat:b", "Ada Lovelace", "owes", "Bob", GATEWAY)
    old = await writer.add_fact("chat:a", "Ada drinks coffee", MANUAL, subject="Ada Lovelace")
    await writer.add_fact("chat:a", "Ada drinks tea now", MANUAL, subject="Ada Lovelace", supersedes=[old.fact_id])
    rejected = await writer.relate("chat:b", "Bob", "hates", "Acme", GATEWAY)
    await writer.review(find_target_now(rejected), "rejected")
    gone = await writer.add_fact("chat:b", "Bob lives on a boat", MANUAL, subject="Bob")
    from gormes.memory.writer import MemoryTarget

    await writer.forget(MemoryTarget(id=gone.fact_id, kind="fact", scope="chat:b"), reason="asked to")
    return writer


def find_target_now(edge: MemoryRelationshipObserved):
    from gormes.memory.writer import MemoryTarget

    return MemoryTarget(id=edge.relationship_id, kind="relationship", scope=edge.provenance.scope)


def dump(path: Path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(path)
    try:
        out = {t: conn.execute(f"SELECT rowid, * FROM {t} ORDER BY rowid").fetchall() for t in (ENTITIES, RELATIONSHIPS, FACTS)}
        out["fts"] = conn.execute(f"SELECT rowid FROM {FACTS_FTS} WHERE {FACTS_FTS} MATCH 'ada' ORDER BY rowid").fetchall()
        return out
    finally:
        conn.close()


async def test_rebuild_gives_identical_tables(store, db_path: Path):
    await seed(store)
    runner = ProjectionRunner(store, memory_projection)
    await runner.catch_up()
    before = dump(db_path)
    assert before[RELATIONSHIPS] and before[FACTS] and before["fts"]
    await runner.rebuild()
    assert dump(db_path) == before


async def test_every_relationship_carries_its_provenance(store, db_path: Path):
    await seed(store)
    await ProjectionRunner(store, memory_projection).catch_up()
    conn = sqlite3.connect(db_path)
    conn.row_factory = sqlite3.Row
    rows = conn.execute(f"SELECT * FROM {RELATIONSHIPS}").fetchall()
    assert len(rows) == 4
    for row in rows:
        assert row["origin_run"] or row["origin_artifact"], dict(row)
        assert row["provenance_kind"] in ("manual", "extracted", "imported", "reviewed")
        assert len(row["evidence_hash"]) == 64
        assert 0 < row["confidence"] <= 1
        assert row["first_seen"] <= row["last_seen"]
        assert row["scope"] in ("chat:a", "chat:b") and row["source_trust"]
    extracted = [r for r in rows if r["provenance_kind"] == "extracted"]
    assert {(r["origin_run"], r["origin_turn"], r["extractor_version"]) for r in extracted} == {("run-1", "seq:2", "memory-extractor/1")}


async def test_a_repeat_observation_keeps_first_seen_and_moves_last_seen(store, db_path: Path):
    await seed(store)
    await ProjectionRunner(store, memory_projection).catch_up()
    conn = sqlite3.connect(db_path)
    first, last, seen, origin = conn.execute(
        f"SELECT first_seen, last_seen, observations, origin_artifact FROM {RELATIONSHIPS} WHERE predicate = 'works_at'"
    ).fetchone()
    assert last - first == 120.0 and seen == 2 and origin == "notes/ada.md"


async def test_states_untrusted_unreviewed_rejected_stale_forgotten(store, db_path: Path):
    await seed(store)
    await ProjectionRunner(store, memory_projection).catch_up()
    conn = sqlite3.connect(db_path)
    states = dict(conn.execute(f"SELECT predicate, review_state FROM {RELATIONSHIPS}").fetchall())
    assert states == {"works_at": "trusted", "located_in": "trusted", "owes": "unreviewed", "hates": "rejected"}
    facts = {t: (stale, forgotten) for t, stale, forgotten in conn.execute(f"SELECT text, stale, forgotten FROM {FACTS}")}
    assert facts == {"Ada drinks coffee": (1, 0), "Ada drinks tea now": (0, 0), "Bob lives on a boat": (0, 1)}
    target = find_target(conn, conn.execute(f"SELECT relationship_id FROM {RELATIONSHIPS} WHERE predicate='owes'").fetchone()[0])
    assert (target.kind, target.scope, target.review_state) == ("relationship", "chat:b", "unreviewed")
