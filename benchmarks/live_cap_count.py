"""The live-jobs cap's count, read from `jobs_capped_live` (decision 0070's addendum).

A gateway's or child agent's submit counts its class's live jobs in the transaction
that records the job, under the store's write lock (`JobQueue.live_count_in`), so
every other writer waits for the count. Two ledgers, made in the same run with the
same jobs: the gateway class's HELD live jobs (the default cap's worth, the most the
count ever reads) and OPERATOR waiting jobs of the operator's (the Submitter
`job.submit` records for it):

- gormes: the ledger as gormes builds it, counted as gormes counts;
- before: the same ledger without `jobs_capped_live`, counted with the SQL of
  decision 0070 (`status IN (<live>) AND <submitter's trust> = ?`), which read every
  live job of every class and read the class out of each one's JSON. (Not the old SQL
  on the new ledger: PostgreSQL proves that its WHERE implies the index's, and would
  use the index for it too.)

Each sample is one count in a write transaction (`store.transact`), timed around the
statement alone; the two ledgers alternate sample by sample, so both see the same
machine. Durability `normal` on SQLite. With `--postgres URL`, the same on two fresh
schemas of that database (dropped afterwards).

What the index costs the job path (`transitions`, SQLite): the ledger's UPDATEs of a
claim, a lease renewal and a completion (the SQL gormes compiles), run with
`executemany` in rounds of ROUND rows as a worker's rounds are, on a ledger of
TRANSITION_JOBS jobs of the operator's (each with its Submitter's JSON, which the
index's WHERE reads when a live job's status changes), with the index and without it,
round by round alternately; medians of the rounds in us a row.

Prints one JSON line: per backend the count's medians in ms, `ratio` (gormes over
before) and each count's plan; `transitions`: us a row, with and without, and ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))
from _common import median, progress, report, scratch_dir  # noqa: E402
from _ledger_writes import INSERT_JOB, ledger_pair, ledger_writes, timed_steps  # noqa: E402

from gormes.actors.jobs.queue import JobQueue  # noqa: E402
from gormes.events.job_machine import LIVE  # noqa: E402
from gormes.events.jobs import Submitter  # noqa: E402
from gormes.events.scratch_store import scratch_store  # noqa: E402
from gormes.projections import ledger  # noqa: E402

HELD = 1_000
OPERATOR = 10_000
SAMPLES = 200
GATEWAY = Submitter(trust="gateway", caller="mcp:bench", scope="chat:mcp-bench")
OPERATOR_SUBMITTER = Submitter(trust="operator", caller="cli")
AT_ONCE = 200  # submits in flight while filling (group commits: a fill takes seconds, not minutes)
TRANSITION_JOBS = 12_800
ROUND = 128  # a worker's round (benchmarks/jobs.py's concurrency)


def count_before(conn: Any, trust: str) -> int:
    """`JobQueue.live_count_in` as decision 0070 made it."""
    d = getattr(conn, "dialect", "sqlite")
    sql = f"SELECT count(*) FROM jobs WHERE {ledger.status_in(LIVE)} AND {ledger.submitter_trust(d)} = ?"
    return int(conn.execute(sql, (trust,)).fetchone()[0])


def count_sql(conn: Any, counted_as: str) -> str:
    d = getattr(conn, "dialect", "sqlite")
    if counted_as == "before":
        return f"SELECT count(*) FROM jobs WHERE {ledger.status_in(LIVE)} AND {ledger.submitter_trust(d)} = ?"
    return f"SELECT count(*) FROM jobs WHERE {ledger.capped_live(d)} AND {ledger.submitter_trust(d)} = ?"


COUNTS = {"gormes": JobQueue.live_count_in, "before": count_before}


async def fill(queue: JobQueue, n: int, submitter: Submitter) -> None:
    for start in range(0, n, AT_ONCE):
        async with trio.open_nursery() as nursery:
            for i in range(start, min(n, start + AT_ONCE)):
                nursery.start_soon(lambda i=i: queue.submit("echo", {"n": i}, submitter=submitter))


def plan(tx: Any, counted_as: str) -> str:
    sql = count_sql(tx, counted_as)
    if getattr(tx, "dialect", "sqlite") == "postgres":
        return " / ".join(r[0].strip() for r in tx.execute(f"EXPLAIN {sql}", ("gateway",)).fetchall())
    return " / ".join(r[3] for r in tx.execute(f"EXPLAIN QUERY PLAN {sql}", ("gateway",)).fetchall())


async def measure(backend: str, where: dict[str, Any], operator: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"gormes": [], "before": []}
    plans: dict[str, str] = {}
    async with scratch_store(where["gormes"], "gormes_bench") as now, \
            scratch_store(where["before"], "gormes_bench") as before:
        stores = {"gormes": now, "before": before}
        for name, store in stores.items():
            queue = await JobQueue.open(store)
            progress(f"live_cap_count ({backend}, {name}): {HELD} gateway jobs, {operator} operator jobs ...")
            await fill(queue, HELD, GATEWAY)
            await fill(queue, operator, OPERATOR_SUBMITTER)
        await before.transact(lambda tx: tx.execute("DROP INDEX jobs_capped_live"))
        for name, store in stores.items():
            if backend == "postgres":  # the planner's statistics, as autovacuum would have them
                await store.transact(lambda tx: tx.execute("ANALYZE jobs"))
            plans[name] = await store.transact(lambda tx, name=name: plan(tx, name))

        def timed(tx: Any, name: str) -> tuple[float, int]:
            tx.execute("SELECT 1")  # the transaction begun (PostgreSQL: its table lock taken)
            start = time.perf_counter()
            n = COUNTS[name](tx, "gateway")
            return time.perf_counter() - start, n

        for sample in range(SAMPLES):
            order = ("gormes", "before") if sample % 2 == 0 else ("before", "gormes")
            for name in order:
                elapsed, n = await stores[name].transact(lambda tx, name=name: timed(tx, name))
                if n != HELD:
                    raise SystemExit(f"{name} counted {n} live gateway jobs, not {HELD}")
                times[name].append(elapsed)
    ms = {name: median(values) * 1000 for name, values in times.items()}
    return {"gormes_ms": round(ms["gormes"], 4), "before_ms": round(ms["before"], 4),
            "ratio": round(ms["gormes"] / ms["before"], 4), "plans": plans}


def transition_costs(d: Path) -> dict[str, Any]:
    """The claim's, the renewal's and the completion's UPDATE, us a row, on a ledger of
    operator jobs with `jobs_capped_live` and without it (see the module's doc)."""
    import msgspec

    writes = ledger_writes()
    steps = {
        "claim": (writes["JobClaimed"], lambda i: (1, 1, "token", 2, 30_000, "w", 1, 2, f"job-{i:06}")),
        "renew": (writes["JobLeaseRenewed"], lambda i: (3, 3, f"job-{i:06}")),
        "complete": (writes["JobCompleted"], lambda i: ('"done"', 4, 4, 4, f"job-{i:06}")),
    }
    submitter = msgspec.json.encode(OPERATOR_SUBMITTER).decode()
    conns = ledger_pair(d, "transitions", "jobs_capped_live")
    for conn in conns.values():
        conn.execute("BEGIN")
        conn.executemany(INSERT_JOB, [(f"job-{i:06}", i, i, submitter) for i in range(TRANSITION_JOBS)])
        conn.execute("COMMIT")
    return {"jobs": TRANSITION_JOBS, "round": ROUND, **timed_steps(conns, steps, TRANSITION_JOBS, ROUND)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", metavar="URL", help="also measure on this PostgreSQL database")
    parser.add_argument("--operator", type=int, default=OPERATOR, help=f"operator jobs waiting ({OPERATOR})")
    args = parser.parse_args()

    result: dict[str, object] = {"benchmark": "live_cap_count", "held": HELD, "operator": args.operator,
                                 "samples": SAMPLES}
    with scratch_dir() as d:
        backends: list[tuple[str, dict[str, Any]]] = [
            ("sqlite", {"gormes": d / "gormes.db", "before": d / "before.db"})]
        if args.postgres:
            backends.append(("postgres", {"gormes": args.postgres, "before": args.postgres}))
        for backend, where in backends:
            result[backend] = await measure(backend, where, args.operator)
        progress(f"live_cap_count: transitions of {TRANSITION_JOBS} operator jobs ...")
        result["transitions"] = transition_costs(d)
    report(result)


if __name__ == "__main__":
    trio.run(main)
