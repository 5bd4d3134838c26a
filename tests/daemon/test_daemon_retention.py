"""The daemon's retention policy (docs/retention.md): with `retain_older_than_days` set
it calls log.retain as `system` at start-up, archiving what ended before the horizon
(audited and logged, a call that archives nothing too); without it, nothing is
retained."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from gormes.daemon import Daemon, DaemonSettings, HandlerLoader, InvalidSettings
from gormes.events.audit import OperationAudited
from gormes.events.retention import RETENTION_STREAM
from gormes.events.runs import RunCompleted, RunStarted
from gormes.systemd import Notifier

HANG_GUARD = 60  # seconds; only stops a broken test from hanging, never asserted on


async def run_one_retention(store, tmp_path: Path, older_than_days: float, caplog) -> None:
    """The daemon, from its start until its first log.retain call has ended (it logs
    its outcome then; its audit record may come sooner, sealed with the deletion)."""
    loader = HandlerLoader()
    settings = DaemonSettings(governor=False, cron=False, status_interval_s=60,
                              retain_older_than_days=older_than_days, retain_archive=str(tmp_path / "archive"))
    daemon = Daemon(store.path, settings, notifier=Notifier(None), loader=loader, handlers=loader.load(()))
    with trio.fail_after(HANG_GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon.run)
            while not [m for m in caplog.messages if m.startswith("retention:")]:
                await trio.sleep(0.02)  # until the call has ended (stopping sooner would cancel it)
            daemon._stop.set()


async def test_the_daemon_retains_what_ended_before_its_horizon_as_system(store, tmp_path: Path, caplog) -> None:
    await store.append("run-old", [RunStarted(run_id="old", handler="agent", handler_version="v"),
                                   RunCompleted(result=1)])
    with caplog.at_level(logging.INFO, logger="gormes"):
        await run_one_retention(store, tmp_path, older_than_days=0, caplog=caplog)
    assert await store.read_stream("run-old") == []
    assert len(await store.read_stream(RETENTION_STREAM)) == 1
    assert len(list((tmp_path / "archive").glob("retained-*.jsonl.gz"))) == 1
    audits = [r.event for r in await store.read_all() if isinstance(r.event, OperationAudited)]
    assert [(a.operation, a.trust, a.outcome) for a in audits] == [("log.retain", "system", "ok")]
    assert [m for m in caplog.messages if m.startswith("retention:")] == [
        f"retention: archived 1 stream(s), 2 event(s) to {next((tmp_path / 'archive').glob('*.jsonl.gz'))}"]


async def test_a_retention_that_archives_nothing_is_audited_and_logged(store, tmp_path: Path, caplog) -> None:
    await store.append("run-new", [RunStarted(run_id="new", handler="agent", handler_version="v"),
                                   RunCompleted(result=1)])
    with caplog.at_level(logging.INFO, logger="gormes"):
        await run_one_retention(store, tmp_path, older_than_days=90, caplog=caplog)
    assert len(await store.read_stream("run-new")) == 2
    audits = [r.event for r in await store.read_all() if isinstance(r.event, OperationAudited)]
    assert [(a.operation, a.trust, a.outcome) for a in audits] == [("log.retain", "system", "ok")]
    assert [m for m in caplog.messages if m.startswith("retention:")] == [
        "retention: nothing to archive (nothing ended more than 90 day(s) ago)"]


@pytest.mark.parametrize("bad", [{"retain_older_than_days": -1}, {"retain_every_s": 0}])
def test_bad_retention_settings_are_refused(bad: dict) -> None:
    with pytest.raises(InvalidSettings):
        DaemonSettings(**bad)
