"""`gormes daemon` (in-process) keeps the projections current and runs cron, on
SQLite and on PostgreSQL (memory included, on both)."""

from __future__ import annotations

import logging

import trio
from pg_helpers import url_for_schema
from projection_helpers import rows

from gormes.actors.jobs.handlers import HandlerRegistry
from gormes.actors.jobs.queue import JobQueue
from gormes.daemon import Daemon, DaemonSettings, HandlerLoader
from gormes.events.notes import NoteAdded
from gormes.systemd import Notifier

HANG_GUARD = 30  # seconds; only stops a broken test from hanging, never asserted on


async def echo(ctx, data):
    return {"echo": data}


async def test_the_daemon_runs_projections_and_cron(store, backend, caplog):
    target = url_for_schema(store.schema) if backend == "postgres" else store.path
    handlers = HandlerRegistry()
    handlers.register("echo", echo)
    daemon = Daemon(
        target, DaemonSettings(concurrency=2, governor=False, status_interval_s=60),
        notifier=Notifier(None), loader=HandlerLoader(), handlers=handlers,
    )
    caplog.set_level(logging.WARNING, logger="gormes.daemon")
    queue = await JobQueue.open(store)
    with trio.fail_after(HANG_GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon.run)
            job = await queue.submit("echo", {"n": 1})
            await store.append("note-1", [NoteAdded(text="hello")])
            while (await queue.get(job.id)).status != "completed":
                await trio.sleep(0.02)
            head = await store.head()
            # The streams projection follows the log inside the daemon.
            while not await rows(store, "SELECT 1 FROM tracking WHERE projection = 'streams'"
                                 " AND position >= ?", (head,)):
                await trio.sleep(0.02)
            assert daemon.scheduler is not None  # cron runs on both backends
            daemon._stop.set()
    streams = dict(await rows(store, "SELECT stream, version FROM streams"))
    assert streams["note-1"] == 1 and streams[f"job-{job.id}"] >= 3
    built = {name for (name,) in await rows(store, "SELECT projection FROM projection_versions")}
    assert {"streams", "runs", "schedules", "skill_usage", "ledger"} <= built
    assert "memory" in built and "runs on SQLite only" not in caplog.text
