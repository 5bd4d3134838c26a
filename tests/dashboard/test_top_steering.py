"""`gormes top` steered through its keyboard task: bytes written to a pipe (as a
terminal would send them) reach a real run's or job's inbox through the audited
door, their receipt appears once read, and a cancel waits for y."""

from __future__ import annotations

import io
import json
import os
import sqlite3
from pathlib import Path

import trio
from rich.console import Console
from rich.live import Live

from gormes.actors.jobs.governor import Governor, GovernorPolicy, LoadSample
from gormes.actors.jobs.handlers import HandlerRegistry
from gormes.actors.jobs.heartbeat import Heartbeat
from gormes.actors.jobs.worker import Worker, WorkerConfig
from gormes.actors.runs.context import RunHandlerRegistry, run_handler
from gormes.actors.runs.manager import RunManager
from gormes.dashboard.app import TopApp, open_views
from gormes.dashboard.read import read_snapshot
from gormes.dashboard.render import render_dashboard
from gormes.events.open import open_store
from gormes.events.runs import RunInboxRead, run_stream
from gormes.providers.pricing import PricingTable

HANG_GUARD = 30  # seconds; only stops a broken test from hanging, never asserted on


def screen(app: TopApp) -> str:
    console = Console(record=True, width=200, color_system=None, file=io.StringIO())
    assert app.snapshot is not None
    console.print(render_dashboard(app.snapshot, app.ui))
    return console.export_text()


class SteeredApp(TopApp):
    """The real app; each drawn frame (the end of one terminal read) is signalled."""

    drawn: trio.Event

    def draw(self) -> None:
        super().draw()
        self.drawn.set()


class Top:
    """A TopApp on `store` whose keyboard task reads a pipe."""

    def __init__(self, app: SteeredApp, write_fd: int) -> None:
        self.app = app
        self.write_fd = write_fd

    async def keys(self, data: bytes) -> None:
        """Send `data` as one terminal read and wait until the app has acted on it and drawn."""
        self.app.drawn = trio.Event()
        os.write(self.write_fd, data)
        if data != b"q":
            await self.app.drawn.wait()


async def drive(store, body) -> None:
    queue, runner = await open_views(store)
    console = Console(file=io.StringIO(), width=200, height=60, color_system=None)
    read_fd, write_fd = os.pipe()
    try:
        with Live(console=console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False) as live:
            app = SteeredApp(store, queue, runner, PricingTable({}), live, fps=10)
            await app.reload()
            top = Top(app, write_fd)
            with trio.fail_after(HANG_GUARD):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(app.keyboard, read_fd)
                    await body(top)
                    await top.keys(b"q")
                    await app.done.wait()
    finally:
        os.close(read_fd)
        os.close(write_fd)


def audits(db: Path) -> list[dict]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT data FROM events WHERE type = 'audit.operation' ORDER BY position").fetchall()
    finally:
        conn.close()
    return [json.loads(data) for (data,) in rows]


async def test_a_message_typed_in_top_reaches_the_runs_inbox_and_its_receipt_shows(tmp_path: Path):
    db = tmp_path / "top.db"
    handlers = RunHandlerRegistry()
    go = trio.Event()

    @run_handler("listener", registry=handlers)
    async def listener(ctx, input):
        await go.wait()
        return [m.payload for m in await ctx.inbox()]

    async with open_store(db) as store, RunManager.open(store, handlers=handlers) as runs:
        handle = await runs.start("listener", None)

        async def body(top: Top) -> None:
            app = top.app
            await app.reload()
            assert app.ui.run_ids == (handle.run_id,)
            await top.keys(b"\tm")  # the runs pane; m: a message to the selected run
            await top.keys("wrap up, q".encode())  # q is text while typing
            assert app.ui.draft is not None and app.ui.draft.text == "wrap up, q"
            assert f"message to run {handle.run_id}: wrap up, q_" in screen(app)
            await top.keys(b"\r")
            receipt = app.ui.receipt
            assert receipt is not None and receipt.run_id == handle.run_id and not receipt.read
            assert f"message {receipt.message_id} to run {handle.run_id}: not read yet" in screen(app)
            go.set()
            assert (await handle.outcome()).result == ["wrap up, q"]
            await app.reload()
            reads = [r.event for r in await store.read_stream(run_stream(handle.run_id))
                     if isinstance(r.event, RunInboxRead)]
            assert app.ui.receipt.read and app.ui.receipt.read_seq == reads[0].seq
            assert f"message {receipt.message_id} to run {handle.run_id}: read at seq {reads[0].seq}" in screen(app)

        await drive(store, body)
    sent = [a for a in audits(db) if a["operation"] == "run.send"]
    assert [(a["trust"], a["caller"], a["outcome"]) for a in sent] == [("operator", "cli", "ok")]


async def test_a_message_to_a_job_lands_in_its_inbox_and_is_seen_read(tmp_path: Path):
    db = tmp_path / "top.db"
    async with open_store(db) as store:
        queue, _ = await open_views(store)
        job = await queue.submit("echo", {"n": 1})

        async def body(top: Top) -> None:
            app = top.app
            await top.keys("mslow down\r".encode())
            receipt = app.ui.receipt
            assert receipt is not None and receipt.job_id == job.id and not receipt.read
            [message] = await queue.inbox(job.id)
            assert (message.id, message.sender, message.payload) == (receipt.message_id, "operator", "slow down")
            claimed = await queue.claim(["echo"])
            assert [m.payload for m in await queue.read_inbox(job.id, claimed.lock_token)] == ["slow down"]
            await app.reload()
            assert app.ui.receipt.read and app.ui.receipt.read_seq is None  # no run: read, no seq
            assert f"message {receipt.message_id} to job {job.id}: read" in screen(app)

        await drive(store, body)
    assert [a["operation"] for a in audits(db)] == ["job.send"]


async def test_a_refused_message_says_why_in_one_line(tmp_path: Path):
    db = tmp_path / "top.db"
    async with open_store(db) as store:
        queue, _ = await open_views(store)
        job = await queue.submit("echo")
        await queue.cancel(job.id)

        async def body(top: Top) -> None:
            await top.keys(b"mhello\r")
            assert top.app.ui.receipt is None and top.app.ui.message.startswith("not sent: ")

        await drive(store, body)


async def test_cancel_from_top_waits_for_y(tmp_path: Path):
    db = tmp_path / "top.db"
    async with open_store(db) as store:
        queue, _ = await open_views(store)
        job = await queue.submit("echo")

        async def body(top: Top) -> None:
            app = top.app
            await top.keys(b"c")
            assert f"cancel job {job.id} and its live children? y/n" in screen(app)
            await top.keys(b"n")
            assert (await queue.get(job.id)).status == "waiting"
            assert f"job {job.id} not cancelled" in app.ui.message
            await top.keys(b"cy")
            assert (await queue.get(job.id)).status == "cancelled"
            assert app.ui.message == f"cancelled {job.id}"

        await drive(store, body)
    assert [(a["operation"], a["outcome"]) for a in audits(db)] == [("job.cancel", "ok")]


async def test_the_governor_panel_shows_recent_decisions_and_why(tmp_path: Path):
    db = tmp_path / "top.db"
    async with open_store(db) as store:
        queue, _ = await open_views(store)
        samples = iter([LoadSample(cpu_percent=99, memory_percent=50), LoadSample(cpu_percent=5, memory_percent=97)])
        clock = iter([1000.0, 1010.0])
        governor = Governor(GovernorPolicy(floor=1, ceiling=8), clock=lambda: next(clock))
        for sample in samples:
            governor.observe(sample)
        worker = Worker(queue, HandlerRegistry(), WorkerConfig(worker_id="w-gov"), governor=governor,
                        log=lambda line: None)
        await Heartbeat(store, worker.id, worker._describe_self).beat()
        snapshot = await read_snapshot(store, pricing=PricingTable({}), now=1012.0)
    [row] = snapshot.workers
    g = row.governor
    assert g is not None and g.limit == 2 and g.cpu == "process"
    assert [(c.previous, c.limit, c.breaker) for c in g.recent] == [(8, 4, False), (4, 2, True)]
    console = Console(record=True, width=220, color_system=None, file=io.StringIO())
    console.print(render_dashboard(snapshot))
    text = console.export_text()
    assert "governor: recent decisions and why" in text
    lines = [line for line in text.splitlines() if "w-gov" in line and "->" in line]
    assert len(lines) == 2
    assert "2s ago" in lines[0] and "4 -> 2" in lines[0] and "breaker tripped" in lines[0]  # newest first
    assert "12s ago" in lines[1] and "8 -> 4" in lines[1] and "cpu 99% (process) above 90%" in lines[1]
