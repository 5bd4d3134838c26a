"""A gateway's `job.list` read from `jobs_capped_owned` (decision 0076's addendum).

A gateway's or child agent's list of its own jobs filtered the ledger by each job's
submitter JSON while walking it newest first, so a ledger whose newest jobs are the
operator's was read (on SQLite, whole rows) until the owner's were found. Two
ledgers, made in the same run with the same jobs: GATEWAY_JOBS of a gateway's, then
OPERATOR jobs of the operator's, newer (the Submitters `job.submit` records):

- gormes: the ledger as gormes builds it, a page read as `job.list` reads it
  (`select_job_page` with the owner, `LIST_PAGE_BYTES`, limit 50);
- before: the same ledger without `jobs_capped_owned`, the page read with decision
  0076's SQL (the owner's terms without the index's WHERE). (Not the old SQL on the
  new ledger: PostgreSQL proves that `trust = 'gateway'` implies the index's WHERE
  and would use the index for it too.)

Each sample is one page in a read (`queue._read`'s connection), timed around the
read; the two ledgers alternate sample by sample. Durability `normal` on SQLite.
With `--postgres URL`, the same on two fresh schemas of that database (ANALYZE'd).

What the index costs the job path (`transitions`, SQLite): a submit's INSERT of a
job's row, and the claim's and the completion's UPDATEs (the SQL gormes compiles),
with `executemany` in rounds of ROUND rows, on ledgers with the index and without,
round by round alternately, for jobs of the operator's (the index's WHERE reads their
JSON and leaves them out), of a gateway's (entered) and of no submitter (a Python
caller's, as benchmarks/concurrency.py's); medians of the rounds in us a row.

Prints one JSON line.
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

from gormes.actors.jobs.pages import read_page  # noqa: E402
from gormes.actors.jobs.queue import JobQueue  # noqa: E402
from gormes.actors.jobs.views import JOBS_NEWEST_FIRST, JobPage, job_from_row, owned_by, select_job_page  # noqa: E402
from gormes.events.jobs import JobOptions, Submitter  # noqa: E402
from gormes.events.scratch_store import scratch_store  # noqa: E402
from gormes.projections import ledger  # noqa: E402
from gormes.tools.jobs import LIST_PAGE_BYTES  # noqa: E402

GATEWAY_JOBS = 3
OPERATOR = 100_000
SAMPLES = 40
LIMIT = 50
INDEX = "jobs_capped_owned"
GATEWAY = Submitter(trust="gateway", caller="mcp:bench", scope="chat:mcp-bench")
OPERATOR_SUBMITTER = Submitter(trust="operator", caller="cli")
PER_TRANSACTION = 1_000
TRANSITION_JOBS = 12_800
ROUND = 128


def page_before(conn: Any, owner: tuple[str, str | None], status: str | None) -> JobPage:
    """`select_job_page` for an owner as decision 0076 read it."""
    where, params = owned_by(conn, owner)
    if status is not None:
        where, params = [*where, "status = ?"], [*params, status]
    page = read_page(conn, JOBS_NEWEST_FIRST, where, params, LIMIT, past=None, max_bytes=LIST_PAGE_BYTES)
    return JobPage([job_from_row(page.columns, row) for row in page.rows], page.more)


def page_now(conn: Any, owner: tuple[str, str | None], status: str | None) -> JobPage:
    return select_job_page(conn, status, None, None, LIMIT, owner, max_bytes=LIST_PAGE_BYTES)


PAGES = {"gormes": page_now, "before": page_before}


async def fill(store: Any, queue: JobQueue, n: int, submitter: Submitter, first_at: int) -> None:
    for start in range(0, n, PER_TRANSACTION):
        def submit(tx: Any, start: int = start) -> None:
            for i in range(start, min(n, start + PER_TRANSACTION)):
                queue.submit_in(tx, first_at + i, "echo", {"n": i}, JobOptions(), submitter=submitter)

        await store.transact(submit)


def plan(conn: Any, name: str, status: str | None) -> str:
    kept: list[tuple[str, Any]] = []

    class Recording:
        dialect = getattr(conn, "dialect", "sqlite")

        def execute(self, sql: str, params: Any = ()) -> Any:
            kept.append((sql, params))
            return conn.execute(sql, params)

    PAGES[name](Recording(), (GATEWAY.trust, GATEWAY.scope), status)
    sql, params = kept[0]
    if getattr(conn, "dialect", "sqlite") == "postgres":
        return " / ".join(r[0].strip() for r in conn.execute(f"EXPLAIN {sql}", params).fetchall())
    return " / ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall())


async def measure(backend: str, where: dict[str, Any], operator: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with scratch_store(where["gormes"], "gormes_bench") as now, \
            scratch_store(where["before"], "gormes_bench") as before:
        stores = {"gormes": now, "before": before}
        queues = {}
        for name, store in stores.items():
            queue = queues[name] = await JobQueue.open(store)
            progress(f"owner_list ({backend}, {name}): {GATEWAY_JOBS} gateway jobs, {operator} operator jobs ...")
            await fill(store, queue, GATEWAY_JOBS, GATEWAY, 1_000_000)
            await fill(store, queue, operator, OPERATOR_SUBMITTER, 2_000_000)
        await before.transact(lambda tx: tx.execute(f"DROP INDEX {INDEX}"))
        if backend == "postgres":  # the planner's statistics, as autovacuum would have them
            for store in stores.values():
                await store.transact(lambda tx: tx.execute("ANALYZE jobs"))
        owner = (GATEWAY.trust, GATEWAY.scope)
        for status in (None, "waiting"):
            times: dict[str, list[float]] = {"gormes": [], "before": []}
            plans = {name: await queues[name]._read(lambda c, name=name: plan(c, name, status)) for name in stores}

            def timed(conn: Any, name: str) -> tuple[float, int]:
                start = time.perf_counter()
                page = PAGES[name](conn, owner, status)
                return time.perf_counter() - start, len(page.jobs)

            for sample in range(SAMPLES):
                order = ("gormes", "before") if sample % 2 == 0 else ("before", "gormes")
                for name in order:
                    elapsed, n = await queues[name]._read(lambda c, name=name: timed(c, name))
                    if n != GATEWAY_JOBS:
                        raise SystemExit(f"{name} listed {n} gateway jobs, not {GATEWAY_JOBS}")
                    times[name].append(elapsed)
            ms = {name: median(values) * 1000 for name, values in times.items()}
            out[f"status={status}"] = {"gormes_ms": round(ms["gormes"], 4), "before_ms": round(ms["before"], 3),
                                       "ratio": round(ms["gormes"] / ms["before"], 5), "plans": plans}
    return out


def transition_costs(d: Path) -> dict[str, Any]:
    """A job row's INSERT, claim and completion, us a row, with `jobs_capped_owned` and
    without it, for jobs of each kind of submitter (see the module's doc)."""
    import msgspec

    writes = ledger_writes()
    out: dict[str, Any] = {"jobs": TRANSITION_JOBS, "round": ROUND}
    for kind, submitter in (("operator", OPERATOR_SUBMITTER), ("gateway", GATEWAY), ("none", None)):
        text = None if submitter is None else msgspec.json.encode(submitter).decode()
        steps = {
            "insert": (INSERT_JOB, lambda i: (f"job-{i:06}", i, i, text)),
            "claim": (writes["JobClaimed"], lambda i: (1, 1, "token", 2, 30_000, "w", 1, 2, f"job-{i:06}")),
            "complete": (writes["JobCompleted"], lambda i: ('"done"', 4, 4, 4, f"job-{i:06}")),
        }
        conns = ledger_pair(d, f"transitions-{kind}", INDEX)
        out[kind] = timed_steps(conns, steps, TRANSITION_JOBS, ROUND)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", metavar="URL", help="also measure on this PostgreSQL database")
    parser.add_argument("--operator", type=int, default=OPERATOR, help=f"operator jobs, the newest ({OPERATOR})")
    parser.add_argument("--no-list", action="store_true", help="measure only the transitions")
    args = parser.parse_args()

    result: dict[str, object] = {"benchmark": "owner_list", "gateway_jobs": GATEWAY_JOBS,
                                 "operator": args.operator, "samples": SAMPLES, "limit": LIMIT}
    with scratch_dir() as d:
        backends: list[tuple[str, dict[str, Any]]] = [
            ("sqlite", {"gormes": d / "gormes.db", "before": d / "before.db"})]
        if args.postgres:
            backends.append(("postgres", {"gormes": args.postgres, "before": args.postgres}))
        if not args.no_list:
            for backend, where in backends:
                result[backend] = await measure(backend, where, args.operator)
        progress(f"owner_list: transitions of {TRANSITION_JOBS} jobs ...")
        result["transitions"] = transition_costs(d)
    report(result)


if __name__ == "__main__":
    trio.run(main)
