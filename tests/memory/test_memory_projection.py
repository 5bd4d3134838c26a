"""The memory projection: provenance on every edge, merges, rebuild identity."""

from __future__ import annotations

from pathlib import Path

from memory_helpers import rows
from pg_helpers import backend_store

from gormes.events.memory import MemoryRelationshipObserved, Origin
from gormes.memory.writer import MemoryWriter, Source, find_target
from gormes.projections.memory import (
    ENTITIES,
    FACTS,
    FACTS_FTS,
    FACTS_TSV,
    FACTS_TSV_INDEX,
    RELATIONSHIPS,
    SCHEMA,
    held_by,
    memory_projection,
    read_connection,
    recorded_from,
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


_KEYS = {ENTITIES: "scope, entity_id", RELATIONSHIPS: "relationship_id", FACTS: "fact_id"}


async def dump(store, backend: str) -> dict[str, list[tuple]]:
    """Every memory row (by key), and which facts full-text search finds for 'ada'."""
    out = {t: await rows(store, f"SELECT * FROM {t} ORDER BY {key}") for t, key in _KEYS.items()}
    if backend == "postgres":
        out["fts"] = await rows(store, f"SELECT fact_id FROM {FACTS} WHERE {FACTS_TSV.format(alias='')} "
                                       f"@@ websearch_to_tsquery('english', 'ada') ORDER BY fact_id")
    else:
        out["fts"] = await rows(store, f"SELECT f.fact_id FROM {FACTS_FTS} JOIN {FACTS} f ON f.rowid = "
                                       f"{FACTS_FTS}.rowid WHERE {FACTS_FTS} MATCH 'ada' ORDER BY f.fact_id")
    return out


async def test_rebuild_gives_identical_tables(store, backend):
    await seed(store)
    runner = ProjectionRunner(store, memory_projection)
    await runner.catch_up()
    before = await dump(store, backend)
    assert before[RELATIONSHIPS] and before[FACTS] and len(before["fts"]) == 2
    await runner.rebuild()
    assert await dump(store, backend) == before


async def test_both_backends_hold_the_same_rows(tmp_path: Path):
    """The same events give the same memory rows on SQLite and on PostgreSQL."""
    dumps = []
    for backend in ("sqlite", "postgres"):
        async with backend_store(backend, tmp_path / "gormes.db") as store:
            await seed(store)
            await ProjectionRunner(store, memory_projection).catch_up()
            dumps.append(await dump(store, backend))
    assert dumps[0] == dumps[1]
    assert dumps[0][ENTITIES] and dumps[0][RELATIONSHIPS] and dumps[0][FACTS]


async def test_postgres_searches_through_the_gin_index(tmp_path: Path):
    async with backend_store("postgres", tmp_path / "unused.db") as store:
        await seed(store)
        await ProjectionRunner(store, memory_projection).catch_up()
        assert FACTS_TSV_INDEX in await store.read_with(_plan)


def _plan(log) -> str:
    conn = read_connection(log)
    conn.execute("SET LOCAL enable_seqscan = off")
    return "\n".join(r[0] for r in conn.execute(
        f"EXPLAIN SELECT fact_id FROM {FACTS} f WHERE {FACTS_TSV.format(alias='f.')} "
        "@@ websearch_to_tsquery('english', ?)", ("ada",)))


async def test_what_a_class_holds_is_counted_from_an_index(store, backend):
    """`held_by` (the untrusted classes' memory cap): the observations of the live
    facts and relationships from a class's text, rejected ones too, forgotten ones
    not; read from an index, never from the table's rows or the log. And
    `recorded_from`: whose each item is, and whether it is forgotten."""
    await seed(store)
    await ProjectionRunner(store, memory_projection).catch_up()
    held = await store.read_sql(lambda conn: {t: held_by(conn, t) for t in ("gateway", "operator", "child-agent")})
    assert held == {"gateway": 2, "operator": 5, "child-agent": 0}  # the boat fact was forgotten
    [(gone,)] = await rows(store, f"SELECT fact_id FROM {FACTS} WHERE forgotten = 1")
    [(owed,)] = await rows(store, f"SELECT relationship_id FROM {RELATIONSHIPS} WHERE predicate = 'owes'")
    found = await store.read_sql(lambda conn: recorded_from(conn, [gone, "f_nothing"], [owed]))
    assert found == {gone: ("operator", True), owed: ("gateway", False)}

    def plan(log) -> str:
        conn = read_connection(log)
        if backend == "postgres":
            conn.execute("SET LOCAL enable_seqscan = off")  # its planner has no statistics on so few rows
        sql = f"SELECT coalesce(sum(observations), 0) FROM {{}} WHERE source_trust = ? AND forgotten = 0"
        explain = "EXPLAIN" if backend == "postgres" else "EXPLAIN QUERY PLAN"
        return "\n".join(str(r[-1]) for t in (FACTS, RELATIONSHIPS)
                         for r in conn.execute(f"{explain} {sql.format(t)}", ("gateway",)))

    steps = await store.read_with(plan)
    for table in (FACTS, RELATIONSHIPS):
        assert f"idx_{table}_source_trust_forgotten_observations" in steps, steps
    if backend == "sqlite":
        assert steps.count("USING COVERING INDEX") == 2, steps


async def test_every_relationship_carries_its_provenance(store):
    await seed(store)
    await ProjectionRunner(store, memory_projection).catch_up()
    names = [c for c in SCHEMA.tables[1].columns]
    found = [dict(zip(names, r, strict=True)) for r in await rows(store, f"SELECT {', '.join(names)} FROM {RELATIONSHIPS}")]
    assert len(found) == 4
    for row in found:
        assert row["origin_run"] or row["origin_artifact"], row
        assert row["provenance_kind"] in ("manual", "extracted", "imported", "reviewed")
        assert len(row["evidence_hash"]) == 64
        assert 0 < row["confidence"] <= 1
        assert row["first_seen"] <= row["last_seen"]
        assert row["scope"] in ("chat:a", "chat:b") and row["source_trust"]
    extracted = [r for r in found if r["provenance_kind"] == "extracted"]
    assert {(r["origin_run"], r["origin_turn"], r["extractor_version"]) for r in extracted} == {("run-1", "seq:2", "memory-extractor/1")}


async def test_a_repeat_observation_keeps_first_seen_and_moves_last_seen(store):
    await seed(store)
    await ProjectionRunner(store, memory_projection).catch_up()
    [(first, last, seen, origin)] = await rows(
        store,
        f"SELECT first_seen, last_seen, observations, origin_artifact FROM {RELATIONSHIPS} WHERE predicate = 'works_at'",
    )
    assert last - first == 120.0 and seen == 2 and origin == "notes/ada.md"


async def test_states_untrusted_unreviewed_rejected_stale_forgotten(store):
    await seed(store)
    await ProjectionRunner(store, memory_projection).catch_up()
    states = dict(await rows(store, f"SELECT predicate, review_state FROM {RELATIONSHIPS}"))
    assert states == {"works_at": "trusted", "located_in": "trusted", "owes": "unreviewed", "hates": "rejected"}
    facts = {t: (stale, forgotten) for t, stale, forgotten in await rows(store, f"SELECT text, stale, forgotten FROM {FACTS}")}
    assert facts == {"Ada drinks coffee": (1, 0), "Ada drinks tea now": (0, 0), "Bob lives on a boat": (0, 1)}
    [(owes,)] = await rows(store, f"SELECT relationship_id FROM {RELATIONSHIPS} WHERE predicate='owes'")
    target = await store.read_with(lambda log: find_target(read_connection(log), owes))
    assert (target.kind, target.scope, target.review_state) == ("relationship", "chat:b", "unreviewed")
