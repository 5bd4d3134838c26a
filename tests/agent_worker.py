"""A job worker wired as `gormes worker` and the daemon wire one: the built-in
handlers, the `agent` job handler and the agent jobs' cut-off sweep
(gormes/actors/agent_jobs/install.py), for tests that run agent jobs in-process."""

from __future__ import annotations

from typing import Any

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
