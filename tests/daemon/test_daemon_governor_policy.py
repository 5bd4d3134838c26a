"""The governor's thresholds from the daemon's TOML (`[governor_policy]`), handed to its worker."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from gormes.actors.jobs.governor import GovernorPolicy, GovernorSettings
from gormes.daemon import Daemon, DaemonSettings, HandlerLoader, InvalidSettings, load_settings
from gormes.systemd import Notifier

HANG_GUARD = 30  # seconds; only stops a broken test from hanging, never asserted on

POLICY = """concurrency = 6
cron = false
[governor_policy]
cpu = "machine"
cpu_high = 60
cpu_low = 30
memory_high = 80
memory_low = 60
memory_breaker = 90
floor = 2
"""


def test_the_governor_policy_table_is_read_from_the_file(tmp_path: Path):
    path = tmp_path / "daemon.toml"
    path.write_text(POLICY)
    settings = load_settings(path, {})
    assert settings.governor_policy == GovernorSettings(
        cpu="machine", cpu_high=60, cpu_low=30, memory_high=80, memory_low=60, memory_breaker=90, floor=2)
    assert DaemonSettings().governor_policy == GovernorSettings()  # the defaults: process CPU


@pytest.mark.parametrize("table, fault", [
    ("cpu_low = 95", "governor_policy: governor wants 0 <= cpu_low <= cpu_high"),
    ("floor = 20", "floor <= ceiling"),
    ("cpu = 'host'", "bad daemon settings"),
    ("cpu_hi = 50", "bad daemon settings.*cpu_hi"),
])
def test_bad_governor_settings_are_one_clear_error(tmp_path: Path, table: str, fault: str):
    path = tmp_path / "daemon.toml"
    path.write_text(f"concurrency = 8\n[governor_policy]\n{table}\n")
    with pytest.raises(InvalidSettings, match=fault):
        load_settings(path, {})


async def test_the_daemons_worker_is_governed_by_the_files_policy(store, tmp_path: Path):
    path = tmp_path / "daemon.toml"
    path.write_text(POLICY)
    loader = HandlerLoader()
    daemon = Daemon(store.path, load_settings(path, {}), notifier=Notifier(None), loader=loader,
                    handlers=loader.load(()), config_path=path)
    with trio.fail_after(HANG_GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon.run)
            while not daemon.workers:
                await trio.sleep(0.01)
            worker = daemon.worker
            daemon._stop.set()
    assert worker.governor is not None
    assert worker.governor.policy == GovernorPolicy(
        floor=2, ceiling=6, cpu="machine", cpu_high=60, cpu_low=30, memory_high=80, memory_low=60,
        memory_breaker=90)
