"""Recall latency over 10,000 and 100,000 entities, and the memory projection's rebuild rate.

The memory of one project scope: N entities (names of two common words and a
unique tag), 2N relationships to random other entities, N facts (one about
each entity). Events are written to the log, then the `memory` projection is
rebuilt by the projection runner (reading, decoding, applying, FTS triggers,
tracking, committing): rebuild_eps is events per second of that rebuild, at
100,000 entities. Queries name a random entity ("<word> <word> <tag>"), so a
lexical query's OR matches about 2% of the facts and a graph query gets up to
ten seeds before walking two hops. Latencies are of `recall()` on an open
connection (no process start), p50 and p95 of QUERIES queries per mode.

Prints one JSON line.
"""

from __future__ import annotations

import random
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
from _common import progress, report, scratch_dir

from gormes.events.memory import (
    MemoryEntityObserved,
    MemoryFactRecorded,
    MemoryRelationshipObserved,
    Origin,
    Provenance,
    entity_id,
    evidence_hash,
    fact_id,
    memory_stream,
    relationship_id,
)
from gormes.events.sqlite_log import SQLiteLog, WriteBatch
from gormes.events.store import AppendRequest
from gormes.recall.api import recall

SIZES = (10_000, 100_000)
QUERIES = 300
SCOPE = "project:bench"
EDGES_PER_ENTITY = 2
FIRST = [f"w{n}" for n in range(97)]
SECOND = [f"v{n}" for n in range(89)]
TOPICS = ["tea", "coffee", "jazz", "rust", "python", "chess", "hiking", "sqlite", "trio", "gardens"]
ORIGIN = Origin(artifact="benchmarks/recall.py")


def name(i: int) -> str:
    return f"{FIRST[i % 97]} {SECOND[(i // 97) % 89]} t{i}"


def events(n: int, rng: random.Random) -> list[object]:
    out: list[object] = []
    for i in range(n):
        out.append(MemoryEntityObserved(scope=SCOPE, entity_id=entity_id(name(i)), name=name(i), origin=ORIGIN,
                                        observed_at=1e9 + i))
    for i in range(n):
        for _ in range(EDGES_PER_ENTITY):
            j = rng.randrange(n)
            s, o = entity_id(name(i)), entity_id(name(j))
            seen = 1e9 + rng.randrange(n)
            prov = Provenance(origin=ORIGIN, kind="imported", scope=SCOPE, first_seen=seen, last_seen=seen,
                              evidence_hash=evidence_hash(f"{i}-{j}"))
            out.append(MemoryRelationshipObserved(
                relationship_id=relationship_id(SCOPE, s, "knows", o), subject=s, predicate="knows", object=o,
                provenance=prov, review_state="trusted", subject_name=name(i), object_name=name(j)))
        text = f"{name(i)} likes {TOPICS[i % 10]} and {TOPICS[(i * 7) % 10]}"
        prov = Provenance(origin=ORIGIN, kind="imported", scope=SCOPE, first_seen=1e9 + i, last_seen=1e9 + i,
                          evidence_hash=evidence_hash(text))
        out.append(MemoryFactRecorded(fact_id=fact_id(SCOPE, text), text=text, subject=entity_id(name(i)),
                                      provenance=prov, review_state="trusted"))
    return out


def fill(path: Path, n: int) -> int:
    log = SQLiteLog(path, durability="normal")
    all_events = events(n, random.Random(n))
    stream = memory_stream(SCOPE)
    for start in range(0, len(all_events), 10_000):
        log.begin()
        batch = WriteBatch(log)
        batch.append([AppendRequest(stream, all_events[start:start + 10_000])])  # type: ignore[arg-type]
        batch.finish()
        log.commit(batch.versions)
    log.close()
    return len(all_events)


async def rebuild(path: Path) -> float:
    from gormes.events.sqlite import SQLiteEventStore
    from gormes.projections.memory import memory_projection
    from gormes.projections.runner import ProjectionRunner

    async with SQLiteEventStore.open(path, durability="normal") as store:
        runner = ProjectionRunner(store, memory_projection, batch_size=5000)
        start = time.perf_counter()
        await runner.rebuild()
        return time.perf_counter() - start


def latencies(path: Path, n: int, mode: str) -> tuple[float, float]:
    conn = sqlite3.connect(path)
    rng = random.Random(7)
    queries = [name(rng.randrange(n)) for _ in range(QUERIES)]
    recall(conn, queries[0], mode=mode, scope=SCOPE)  # warm the page cache
    times = []
    for q in queries:
        start = time.perf_counter()
        result = recall(conn, q, mode=mode, scope=SCOPE, k=10)
        times.append((time.perf_counter() - start) * 1000)
        assert result.hits, q
    conn.close()
    cuts = statistics.quantiles(times, n=100)
    return round(statistics.median(times), 3), round(cuts[94], 3)


def main() -> None:
    out: dict[str, object] = {}
    with scratch_dir() as d:
        for n in SIZES:
            tag = f"{n // 1000}k"
            path = d / f"recall-{tag}.db"
            progress(f"recall bench: writing the events of {n} entities")
            count = fill(path, n)
            progress(f"recall bench: rebuilding the memory projection from {count} events")
            elapsed = trio.run(rebuild, path)
            if n == SIZES[-1]:
                out["rebuild_eps"] = round(count / elapsed)
            for mode in ("lexical", "graph"):
                progress(f"recall bench: {QUERIES} {mode} queries at {tag}")
                p50, p95 = latencies(path, n, mode)
                out[f"{mode}_p50_ms_{tag}"], out[f"{mode}_p95_ms_{tag}"] = p50, p95
            path.unlink()
    order = [f"{m}_{p}_ms_{s}" for s in ("10k", "100k") for m in ("lexical", "graph") for p in ("p50", "p95")]
    report({**{k: out[k] for k in order}, "rebuild_eps": out["rebuild_eps"],
            "targets_10k": {"lexical_p50_ms": 1.0, "graph_p50_ms": 10.0}})


if __name__ == "__main__":
    main()
