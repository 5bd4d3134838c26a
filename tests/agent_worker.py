"""A job worker wired as `gormes worker` and the daemon wire one: the built-in
handlers, the `agent` job handler and the agent jobs' cut-off sweep
(gormes/actors/agent_jobs/install.py), for tests that run agent jobs in-process."""

from __future__ import annotations

from typing import Any

import trio

from gormes.actors.agent_jobs.install import install, sweeps
from gormes.actors.jobs.handlers import HandlerRegistry, default_registry
from gormes.actors.jobs.worker import Worker, WorkerConfig


def agent_registry() -> HandlerRegistry:
    registry = default_registry.copy()
    install(registry)
    return registry


def agent_worker(queue: Any, config: WorkerConfig | None = None, **options: Any) -> Worker:
    config = config or WorkerConfig()
    return Worker(queue, agent_registry(), config, sweeps=sweeps(queue, config), **options)


ENDED = ("completed", "failed", "dead")


async def work_until_ended(queue: Any, job_id: str, config: WorkerConfig | None = None, *,
                           timeout: float = 30.0, **options: Any) -> Any:
    """Run an agent worker until job `job_id` has ended (completed, failed or dead),
    then stop it; the job as it ended. `timeout` only guards against a hang."""
    worker = agent_worker(queue, config, **options)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        with trio.fail_after(timeout):
            while (job := await queue.get(job_id)) is None or job.status not in ENDED:
                await trio.sleep(0.02)
        worker.stop()
        await worker.wait_stopped()
    return await queue.get(job_id)
