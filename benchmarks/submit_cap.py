"""A gateway's `job.submit` with its live-jobs cap counted in the recording transaction (decision 0070).

Each sample is one `job.submit` of a new job by a gateway caller, through the
executor (its audit record sealed into the submit's transaction), on a log whose
gateway class already holds HELD unfinished jobs (the default cap's worth, the most
the count ever reads):

- gormes: the operation as it is, which counts the class's live jobs in the ledger
  in the transaction that records the job, under the write lock;
- before: the handler as it was before 0070 (the comparator, registered beside it
  under another name, in the same run on the same store): count in a read, then
  submit.

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

from gormes.actors.jobs.queue import JobQueue  # noqa: E402
from gormes.events.scratch_store import scratch_store  # noqa: E402
from gormes.ops.executor import Executor  # noqa: E402
from gormes.ops.spec import Caller, OperationDenied, OperationSpec  # noqa: E402
from gormes.tools.builtin import default_registry  # noqa: E402
from gormes.tools.job_trust import max_live_jobs, submitter_of  # noqa: E402
from gormes.tools.jobs import JobSubmitInput, JobSummary, summary  # noqa: E402

HELD = 1_000
SAMPLES = 200
GATEWAY = Caller(trust="gateway", id="mcp:bench")


async def submit_before(ctx: Any, value: JobSubmitInput) -> JobSummary:
    """job.submit as it was before decision 0070, for a plain job: counted, then submitted."""
    queue = ctx.jobs
    cap = max_live_jobs()
    if await queue.live_count(ctx.caller.trust) >= cap:
        raise OperationDenied("over the cap")
    job = await queue.submit(value.name, value.data, submitter=submitter_of(ctx.caller))
    return summary(job, ctx.caller)


BEFORE = OperationSpec(
    name="bench.submit_before", description="job.submit before 0070", input_type=JobSubmitInput,
    output_type=JobSummary, handler=submit_before, trust=frozenset({"gateway"}), audit_kind="job.write",
    mutating=True, idempotent=False, timeout=10.0,
)


async def measure(backend: str, where: Any) -> dict[str, float]:
    registry = default_registry()
    registry.register(BEFORE)
    times: dict[str, list[float]] = {"gormes": [], "before": []}
    async with scratch_store(where, "gormes_bench") as store:
        executor = Executor(registry, store, jobs=await JobQueue.open(store))
        progress(f"submit_cap ({backend}): {HELD} live jobs held ...")
        for n in range(HELD):
            await executor.call("job.submit", {"name": "echo", "data": {"n": n}}, GATEWAY)
        for n in range(SAMPLES):
            for name, operation in (("gormes", "job.submit"), ("before", BEFORE.name)):
                start = time.perf_counter()
                await executor.call(operation, {"name": "echo", "data": {"sample": n}}, GATEWAY)
                times[name].append(time.perf_counter() - start)
    return {name: median(values) * 1000 for name, values in times.items()}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", metavar="URL", help="also measure on this PostgreSQL database")
    args = parser.parse_args()

    os.environ["GORMES_GATEWAY_MAX_LIVE_JOBS"] = str(HELD + 3 * SAMPLES)
    result: dict[str, object] = {"benchmark": "submit_cap", "held": HELD, "samples": SAMPLES}
    with scratch_dir() as d:
        backends: list[tuple[str, Any]] = [("sqlite", d / "submit.db")]
        if args.postgres:
            backends.append(("postgres", args.postgres))
        for backend, where in backends:
            ms = await measure(backend, where)
            result[backend] = {"gormes_ms": round(ms["gormes"], 3), "before_ms": round(ms["before"], 3),
                               "ratio": round(ms["gormes"] / ms["before"], 3)}
    report(result)


if __name__ == "__main__":
    trio.run(main)
