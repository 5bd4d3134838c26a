"""What a worker needs to run agent jobs: the `agent` handler, the cut-off sweep
and the approvals' timeout sweep.

The job worker sits below the runs an agent job drives, so it does not know agent
jobs: whoever wires a worker (`gormes worker`, the daemon) hands it both.

    registry = default_registry.copy()
    install(registry)
    worker = Worker(queue, registry, config, sweeps=sweeps(queue, config))
"""

from __future__ import annotations

from typing import Any

from gormes.actors.jobs.context import JobContext
from gormes.actors.jobs.handlers import HandlerRegistry
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.worker import Sweep, WorkerConfig
from gormes.actors.runs.approval_book import expire_due
from gormes.ops.registry import Registry

AGENT = "agent"


async def agent(ctx: JobContext, data: Any) -> Any:
    """Run an agent as a durable job (gormes/actors/agent_jobs/handler.py)."""
    # Lazy for start-up time: the agent machinery (runs, providers, the built-in
    # tools) is loaded by the first agent job, not by every worker that may run one.
    from gormes.actors.agent_jobs.handler import agent_job

    return await agent_job(ctx, data)


def install(registry: HandlerRegistry, operations: Registry | None = None) -> None:
    """Register the `agent` job handler (what `run.submit` and MCP's `run__submit`
    queue) in `registry`, unless it has one of that name already: a user's own
    `@gormes.job("agent")` is kept. `operations`: the operations its runs call
    (None: `default_registry()` at each job: the built-ins and what was declared;
    a worker given MCP servers passes the registry that holds their tools)."""
    if AGENT in registry:
        return
    if operations is None:
        registry.register(AGENT, agent)
        return

    async def agent_with_operations(ctx: JobContext, data: Any) -> Any:
        from gormes.actors.agent_jobs.handler import agent_job

        return await agent_job(ctx, data, operations=operations)

    registry.register(AGENT, agent_with_operations)


def sweeps(queue: JobQueue, config: WorkerConfig) -> list[Sweep]:
    """The worker's sweeps, as often as it sweeps stalled leases: agent jobs that
    ended with no attempt running them (gormes/actors/agent_jobs/cut_off.py), and
    approval requests past their timeout (their jobs are parked: nobody else looks)."""
    ended: list[Any] = []  # the EndedJobRuns, made by the first sweep

    async def end_runs_of_ended_jobs() -> list[str]:
        if not ended:
            # Lazy for start-up time: the runs' cut-off machinery loads with the
            # first sweep, not before a worker's first job (its window starts
            # at the first sweep either way).
            from gormes.actors.agent_jobs.cut_off import EndedJobRuns

            # A live worker records its runs' ends itself within a lease (its
            # renewal fails at the latest) and the abort grace.
            ended.append(EndedJobRuns(queue, grace_ms=config.lease_ms + config.abort_grace_ms))
        return await ended[0].sweep()

    async def time_out_approvals() -> list[str]:
        """Approval requests past their timeout: timed out, their parked jobs resumed
        (decision 0033); a read of one stream when none is due."""
        return [d.approval_id for d in await expire_due(queue.store, queue.now_ms())]

    return [Sweep(config.stall_interval_ms, end_runs_of_ended_jobs),
            Sweep(config.stall_interval_ms, time_out_approvals)]
