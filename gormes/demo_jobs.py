"""The jobs step of the demo: a parent job fans out to children, a worker drains them.

A `summarize` job spawns three `fetch` children; each child reports tokens and
progress; when all are done the parent runs again, reads the `child_done`
messages in its inbox and completes with their results. One `flaky` job fails
once and succeeds on its retry. The ledger (a projection kept current inside the
append transaction) is printed at the end.
"""

from __future__ import annotations

from typing import Any

import trio
from rich.console import Console
from rich.table import Table

from gormes.actors.jobs.handlers import HandlerRegistry, default_registry
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.worker import Worker, WorkerConfig
from gormes.events.jobs import Backoff, JobOptions
from gormes.events.store import EventStore


def demo_registry() -> HandlerRegistry:
    registry = default_registry.copy()
    attempts: dict[str, int] = {}

    async def fetch(ctx: Any, data: Any) -> dict[str, Any]:
        await ctx.progress({"step": 1, "total": 2, "message": f"fetching {data['url']}"})
        await trio.sleep(0.01)
        await ctx.tokens(input=120, output=40)
        return {"url": data["url"], "bytes": 1000 + 10 * len(data["url"])}

    async def summarize(ctx: Any, data: Any) -> dict[str, Any]:
        messages = await ctx.inbox()
        if not messages:  # first run: fan out, then wait for the children
            for url in data["urls"]:
                await ctx.spawn("fetch", {"url": url})
            return {"spawned": len(data["urls"])}
        results = [m.payload for m in messages]
        await ctx.tokens(input=300, output=90)
        return {"children": len(results), "outcomes": [r.get("outcome") for r in results]}

    async def flaky(ctx: Any, data: Any) -> str:
        attempts[ctx.id] = attempts.get(ctx.id, 0) + 1
        if attempts[ctx.id] == 1:
            raise RuntimeError("transient failure (the demo fails the first attempt)")
        return f"succeeded on attempt {attempts[ctx.id]}"

    registry.register("fetch", fetch)
    registry.register("summarize", summarize)
    registry.register("flaky", flaky)
    return registry


async def drain_demo_jobs(store: EventStore, console: Console) -> None:
    queue = await JobQueue.open(store)
    parent = await queue.submit(
        "summarize", {"urls": ["https://a.example", "https://b.example", "https://c.example"]}, JobOptions()
    )
    flaky = await queue.submit(
        "flaky", {}, JobOptions(backoff=Backoff(kind="fixed", delay_ms=50, jitter=0.0))
    )
    worker = Worker(
        queue,
        demo_registry(),
        WorkerConfig(concurrency=4, promote_interval_ms=20),
        log=lambda line: console.print(f"  [dim]worker: {line}[/]"),
    )
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            for job_id in (parent.id, flaky.id):
                while (await queue.get(job_id)).status not in ("completed", "failed", "dead", "cancelled"):
                    generation = queue.generation
                    with trio.move_on_after(0.05):
                        await queue.wait_for_work(generation)
            worker.stop()
    jobs = await queue.list(limit=20)
    table = Table(title="job ledger (tokens roll up from children to parent)")
    for column in ("id", "name", "status", "attempts", "parent", "tokens in/out"):
        table.add_column(column, no_wrap=True)
    for job in sorted(jobs, key=lambda j: j.id):
        table.add_row(
            job.id[-8:],
            job.name,
            job.status,
            str(job.attempts_made),
            (job.parent_id or "")[-8:],
            f"{job.tokens.input}/{job.tokens.output}",
        )
    console.print(table)
