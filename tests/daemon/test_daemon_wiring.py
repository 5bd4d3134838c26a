"""The daemon hands each worker it starts the agent jobs' bridge: the `agent`
handler and the cut-off sweep (gormes/actors/agent_jobs/install.py)."""

from __future__ import annotations

import trio

from gormes.actors.agent_jobs import install
from gormes.daemon import Daemon, DaemonSettings, HandlerLoader
from gormes.systemd import Notifier

HANG_GUARD = 30  # seconds; only stops a broken test from hanging, never asserted on


def test_the_loaded_handlers_include_the_agent_job() -> None:
    assert HandlerLoader().load(()).get("agent") is install.agent


async def test_the_daemons_worker_sweeps_the_runs_of_ended_agent_jobs(store) -> None:
    loader = HandlerLoader()
    daemon = Daemon(store.path, DaemonSettings(governor=False, cron=False, status_interval_s=60),
                    notifier=Notifier(None), loader=loader, handlers=loader.load(()))
    with trio.fail_after(HANG_GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon.run)
            while not daemon.workers:
                await trio.sleep(0.01)
            worker = daemon.worker
            daemon._stop.set()
    assert "agent" in worker.registry
    assert [sweep.run.__name__ for sweep in worker.sweeps] == ["end_runs_of_ended_jobs", "time_out_approvals"]
    assert [sweep.interval_ms for sweep in worker.sweeps] == [worker.config.stall_interval_ms] * 2
