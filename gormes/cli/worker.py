"""`gormes worker`: run job handlers until SIGINT or SIGTERM.

On the first signal the worker stops claiming, lets in-flight jobs finish within
the shutdown grace and releases the rest without consuming an attempt; a second
signal ends the grace at once.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import click

from gormes.cli.imports import import_option, mcp_config_option

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GC_THRESHOLD = (50_000, 10, 10)  # the collector's generations (see `_tune_gc`)


@click.command()
@click.option("--queue", "queues", multiple=True, metavar="Q",
              help="Claim only from this queue (repeatable; default: every queue).")
@click.option("--concurrency", type=int, default=10, show_default=True,
              help="Most jobs run at once (the governor may lower it under load).")
@import_option
@mcp_config_option
@click.option("--lease", "lease_ms", type=int, default=30_000,
              show_default=True, metavar="MS", help="Lock lease; renewed every lease/2.")
@click.option("--stall-interval", "stall_interval_ms", type=int,
              default=5_000, show_default=True, metavar="MS", help="How often to sweep stalled jobs.")
@click.option("--stall-grace", "stall_grace_ms", type=int, default=15_000,
              show_default=True, metavar="MS", help="How long past its lease a job counts as stalled.")
@click.option("--shutdown-grace", "shutdown_grace_ms", type=int,
              default=10_000, show_default=True, metavar="MS",
              help="On SIGINT/SIGTERM, how long in-flight jobs may finish before release.")
@click.option("--min-concurrency", type=int, metavar="N",
              help="Floor for the resource governor (default 1).")
@click.option("--governor/--no-governor", default=True, show_default=True,
              help="Adapt concurrency to CPU and memory load; memory circuit breaker.")
@click.option("--governor-cpu", type=click.Choice(["process", "machine"]), default="process",
              show_default=True, help="Whose CPU use the governor reads: this worker's (with its "
              "child processes, as a share of all cores) or the whole machine's.")
@click.option("--cpu-high", type=click.FloatRange(0, 100), default=90.0, show_default=True,
              metavar="PCT", help="Above this CPU use the governor halves concurrency.")
@click.option("--cpu-low", type=click.FloatRange(0, 100), default=70.0, show_default=True,
              metavar="PCT", help="Below this CPU use (and --memory-low) it raises concurrency a step.")
@click.option("--memory-high", type=click.FloatRange(0, 100), default=85.0, show_default=True,
              metavar="PCT", help="Above this memory use (the machine's) it halves concurrency.")
@click.option("--memory-low", type=click.FloatRange(0, 100), default=75.0, show_default=True,
              metavar="PCT", help="Below this memory use (and --cpu-low) it raises concurrency a step.")
@click.option("--memory-breaker", type=click.FloatRange(0, 100), default=95.0, show_default=True,
              metavar="PCT", help="At or above this memory use the circuit breaker kills the "
              "lowest-priority active job, one per sample.")
@click.pass_obj
def worker(obj: Any, queues: tuple[str, ...], concurrency: int, imports: tuple[str, ...], mcp_config: str | None,
           lease_ms: int, stall_interval_ms: int, stall_grace_ms: int, shutdown_grace_ms: int,
           min_concurrency: int | None, governor: bool, governor_cpu: str, cpu_high: float,
           cpu_low: float, memory_high: float, memory_low: float, memory_breaker: float) -> None:
    """Claim and run jobs until SIGINT or SIGTERM."""
    import gc

    gc.set_threshold(*GC_THRESHOLD)  # (before the imports below: see `_tune_gc`)
    from gormes.actors.agent_jobs.install import install as install_agent_jobs
    from gormes.actors.jobs.handlers import default_registry
    from gormes.errors import UserError
    from gormes.tools.imports import load_imports

    for flag, value, low, high in (
        ("--concurrency", concurrency, 1, 10_000), ("--lease", lease_ms, 100, None),
        ("--stall-interval", stall_interval_ms, 10, None), ("--stall-grace", stall_grace_ms, 0, None),
        ("--shutdown-grace", shutdown_grace_ms, 0, None), ("--min-concurrency", min_concurrency, 1, None),
    ):
        if value is not None and (value < low or (high is not None and value > high)):
            # The jobs commands' module (its error and wording) only when needed:
            # a worker starts faster without it.
            from gormes.cli.jobs import check_range

            check_range(flag, value, low, high)
    floor = min_concurrency or 1
    if floor > concurrency:
        raise UserError(f"--min-concurrency {floor} is above --concurrency {concurrency}")
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.actors.jobs.governor import GovernorSettings

    try:
        policy = GovernorSettings(
            floor=floor, cpu=governor_cpu, cpu_high=cpu_high, cpu_low=cpu_low,  # type: ignore[arg-type]
            memory_high=memory_high, memory_low=memory_low, memory_breaker=memory_breaker,
        ).policy(ceiling=concurrency)
    except ValueError as exc:
        raise UserError(f"governor options: {exc}") from None

    # Load handler modules before touching the database: a bad module changes nothing.
    load_imports(imports)
    if mcp_config is not None:  # nor does a bad MCP configuration
        # Lazy for start-up time: loaded only with --mcp-config.
        from gormes.tools.sources import read_mcp_config

        read_mcp_config(mcp_config)

    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.actors.jobs.leases import renewal_warning
    from gormes.actors.jobs.worker import WorkerConfig

    if (warning := renewal_warning(concurrency, lease_ms)) is not None:
        click.echo(warning, err=True)
    try:
        config = WorkerConfig(
            queues=queues or None, concurrency=concurrency, lease_ms=lease_ms,
            stall_interval_ms=stall_interval_ms, stall_grace_ms=stall_grace_ms,
            shutdown_grace_ms=shutdown_grace_ms,
        )
    except ValueError as exc:  # a lease past any timestamp spun the worker, deaf to SIGTERM
        raise UserError(f"worker options: {exc}") from None
    # A signal that arrives before trio listens still ends us cleanly.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    import trio

    registry = default_registry.copy()
    if mcp_config is None:
        install_agent_jobs(registry)  # with MCP servers: once they are started (_serve)
    trio.run(_serve, obj.target, config, registry, policy if governor else None, mcp_config)


async def _serve(db: Any, config: Any, registry: Any, policy: Any,
                 mcp_config: str | None = None) -> None:
    """`policy`: the governor's (a GovernorPolicy), or None to run without one."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import trio

    from gormes.actors.agent_jobs.install import sweeps
    from gormes.actors.jobs.governor import Governor
    from gormes.actors.jobs.queue import JobQueue
    from gormes.actors.jobs.worker import Worker
    from gormes.events.open import open_store

    _tune_gc()

    if policy is not None:
        # The governor's sampler imports psutil: ~10 ms of CPU that would hold up
        # the event loop as the worker starts. A thread imports it meanwhile.
        threading.Thread(target=_import_psutil, daemon=True).start()
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with open_store(db) as store, _mcp_servers(store, mcp_config, registry):
            queue = await JobQueue.open(store)
            governor = Governor(policy) if policy is not None else None
            worker = Worker(queue, registry, config, store=store, governor=governor,
                            sweeps=sweeps(queue, config))
            names = ", ".join(registry.names())
            click.echo(f"gormes worker {worker.id}: handlers {names}; "
                       f"concurrency {config.concurrency}", err=True)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)

                async def on_signals() -> None:
                    count = 0
                    async for _ in signals:
                        count += 1
                        worker.stop()
                        if count >= 2:
                            worker.hurry()

                nursery.start_soon(on_signals)
                await worker.wait_stopped()
                click.echo(f"gormes worker {worker.id}: stopped "
                           f"({worker.completed} completed, {worker.failed} failed)", err=True)
                if worker.abandoned:
                    # Abandoned handlers may never return; every write of ours is
                    # committed, so leaving now loses nothing.
                    click.echo(f"gormes worker {worker.id}: leaving {worker.abandoned} "
                               "abandoned handler(s) behind", err=True)
                    os._exit(0)
                nursery.cancel_scope.cancel()


@asynccontextmanager
async def _mcp_servers(store: Any, mcp_config: str | None, registry: Any) -> AsyncIterator[None]:
    """With `--mcp-config`, the servers run as long as the worker, and the agent
    jobs' runs call their tools too."""
    if mcp_config is None:
        yield
        return
    # Lazy for start-up time, as the worker's other imports: only with --mcp-config.
    from gormes.actors.agent_jobs.install import install as install_agent_jobs
    from gormes.cli.imports import warn
    from gormes.tools.sources import operation_registry

    async with operation_registry(store, mcp_config, warn=warn) as operations:
        install_agent_jobs(registry, operations)
        yield


def _tune_gc() -> None:
    """A worker allocates many short-lived objects per job (events, states, tasks,
    rows), nearly all freed by reference counting. Python's default collects the
    young generation every 700 allocations, hundreds of times a second here, each
    time walking whatever is young: the worker collects it every 50,000 instead
    (`GC_THRESHOLD`, set as the command starts, so the imports are not walked
    either), and what was loaded at start (modules, classes) is frozen out of
    every collection."""
    import gc

    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def _import_psutil() -> None:
    try:
        import psutil  # noqa: F401
    except ImportError:  # the governor reports it when it samples
        pass
