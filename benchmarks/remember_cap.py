"""A gateway's `memory.remember` with its cap counted in the appending transaction (decision 0068).

Each sample is one `memory.remember` of a new fact by a gateway caller, through the
executor (its audit record sealed into the append), on a log whose gateway class
already holds HELD facts:

- gormes: the operation as it is, which catches the memory projection up, then in
  the appending transaction folds what came since (the previous sample's fact) and
  counts there, under the write lock;
- before: the handler as it was before 0068 (the comparator, registered beside it
  under another name, in the same run on the same store): catch up, count in a
  read, then append.

The two alternate sample by sample, so both see the same log and the same machine.
Durability `normal` on SQLite (no fsync per commit): the figure is the work, not the
disk's. With `--postgres URL`, the same on a fresh schema of that database (dropped
afterwards). Prints one JSON line: medians in ms, and `ratio`, gormes over before.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
from _common import median, progress, report, scratch_dir  # noqa: E402

from gormes.events.scratch_store import scratch_store  # noqa: E402
from gormes.memory.writer import MemoryWriter, Source, fact_events  # noqa: E402
from gormes.events.memory import Origin  # noqa: E402
from gormes.ops.executor import Executor  # noqa: E402
from gormes.ops.spec import Caller, OperationDenied, OperationSpec  # noqa: E402
from gormes.projections.memory import held_by, memory_projection  # noqa: E402
from gormes.projections.runner import ProjectionRunner  # noqa: E402
from gormes.tools.builtin import default_registry  # noqa: E402
from gormes.tools.memory import RememberInput, RememberOutput, max_facts  # noqa: E402

HELD = 1_000
SAMPLES = 200
GATEWAY = Caller(trust="gateway", id="mcp:bench")


async def remember_before(ctx: Any, value: RememberInput) -> RememberOutput:
    """memory.remember as it was before decision 0068, for a fact: counted, then appended."""
    scope = "chat:mcp-bench"
    source = Source(origin=Origin(run_id=None, artifact=f"caller:{ctx.caller.id}"), kind="manual",
                    trust=ctx.caller.trust, confidence=value.confidence)
    events = fact_events(scope, value.fact or "", source, ctx.clock())
    cap, store = max_facts(), ctx.store
    await ProjectionRunner(store, memory_projection).catch_up(upto=await store.head())
    held = await store.read_sql(lambda conn: held_by(conn, ctx.caller.trust))
    if held + 1 > cap:
        raise OperationDenied("over the cap")
    await MemoryWriter(store, clock=ctx.clock).append(scope, events, seal=ctx.seal_into)
    return RememberOutput(scope=scope, ids=[events[-1].fact_id], review_state="unreviewed")


BEFORE = OperationSpec(
    name="bench.remember_before", description="memory.remember before 0068", input_type=RememberInput,
    output_type=RememberOutput, handler=remember_before, trust=frozenset({"gateway"}), audit_kind="memory.write",
    mutating=True, idempotent=True, timeout=10.0,
)


async def measure(backend: str, where: Any) -> dict[str, float]:
    registry = default_registry()
    registry.register(BEFORE)
    times: dict[str, list[float]] = {"gormes": [], "before": []}
    async with scratch_store(where, "gormes_bench") as store:
        executor = Executor(registry, store)
        progress(f"remember_cap ({backend}): {HELD} facts held ...")
        for n in range(HELD):
            await executor.call("memory.remember", {"fact": f"held fact {n}"}, GATEWAY)
        for n in range(SAMPLES):
            for name, operation in (("gormes", "memory.remember"), ("before", BEFORE.name)):
                start = time.perf_counter()
                await executor.call(operation, {"fact": f"{name} fact {n}"}, GATEWAY)
                times[name].append(time.perf_counter() - start)
    return {name: median(values) * 1000 for name, values in times.items()}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", metavar="URL", help="also measure on this PostgreSQL database")
    args = parser.parse_args()

    os.environ["GORMES_GATEWAY_MAX_FACTS"] = str(HELD + 3 * SAMPLES)
    result: dict[str, object] = {"benchmark": "remember_cap", "held": HELD, "samples": SAMPLES}
    with scratch_dir() as d:
        backends: list[tuple[str, Any]] = [("sqlite", d / "remember.db")]
        if args.postgres:
            backends.append(("postgres", args.postgres))
        for backend, where in backends:
            ms = await measure(backend, where)
            result[backend] = {"gormes_ms": round(ms["gormes"], 3), "before_ms": round(ms["before"], 3),
                               "ratio": round(ms["gormes"] / ms["before"], 3)}
    report(result)


if __name__ == "__main__":
    trio.run(main)
