"""install.py: what a worker is handed to run agent jobs."""

from __future__ import annotations

from gormes.actors.agent_jobs import install
from gormes.actors.jobs.handlers import HandlerRegistry
from gormes.actors.jobs.worker import WorkerConfig


async def own_agent(ctx, data):
    return "mine"


def test_install_registers_the_agent_job_handler() -> None:
    registry = HandlerRegistry()
    install.install(registry)
    assert registry.names() == ["agent"] and registry.get("agent") is install.agent


def test_a_users_own_agent_handler_is_kept() -> None:
    registry = HandlerRegistry({"agent": own_agent})
    install.install(registry)
    assert registry.get("agent") is own_agent


def test_the_sweeps_run_as_often_as_the_stall_sweep() -> None:
    config = WorkerConfig(stall_interval_ms=123)
    cut_off, approvals = install.sweeps(object(), config)  # the cut-off runs, the approvals' timeouts
    assert cut_off.interval_ms == approvals.interval_ms == 123
