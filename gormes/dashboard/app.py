"""The live loop of `gormes top`: follow the log, re-read the snapshot, draw, obey keys.

    await run_live(db_path, pricing=load_table())   # stdin and stdout must be a terminal
    await run_live("postgresql://...", pricing=...)  # or a PostgreSQL URL

Three trio tasks share one `TopApp`:
- `follow`: a subscription on the log from its head; every event marks the view
  stale (a one-second tick does too, for heartbeats and ages, which are no events);
- `refresh`: when stale, catch the `runs` projection up, read a Snapshot (with
  the pending approvals and the budgets, read from where the last refresh left
  their streams: gormes/dashboard/control.py) and draw, at most `fps` times a second;
- `keyboard`: stdin in cbreak mode, read when trio says it is readable; each key
  goes through the pure `handle_key`, and its action (pause, resume, cancel, a
  message, as the operator, through the audited executor: job.pause, job.resume,
  job.cancel, run.send, job.send, approval.approve, approval.deny, decision 0019;
  open a run's timeline) runs here.
  A sent message's receipt is looked for at each refresh until it is read
  (gormes/dashboard/steer.py).

The terminal is restored on every way out (q, Ctrl-C, an error): the termios
settings are put back and rich leaves the alternate screen and shows the cursor.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import termios
import tty
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import trio
from rich.console import Console
from rich.live import Live

from gormes.actors.jobs.queue import JobQueue
from gormes.actors.runs.timeline import format_view, run_view
from gormes.dashboard.control import ControlWatch
from gormes.dashboard.keys import Action, UiState, decode_keys, handle_key, sync_rows
from gormes.dashboard.model import Snapshot
from gormes.dashboard.read import read_snapshot
from gormes.dashboard.render import render_dashboard, render_timeline
from gormes.dashboard.steer import check_receipt, decide_approval, send_message
from gormes.errors import GormesError, UserError
from gormes.events.open import open_store
from gormes.events.store import EventStore
from gormes.projections.runner import ProjectionRunner
from gormes.projections.runs import runs
from gormes.providers.pricing import PricingTable

DEFAULT_FPS = 10.0
TICK_S = 1.0


@contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """Keys arrive one by one, unechoed; the previous settings come back on exit."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def open_views(store: EventStore) -> tuple[JobQueue, ProjectionRunner]:
    """The queue (ledger installed) and the runs projection's runner, caught up."""
    queue = await JobQueue.open(store)
    runner = ProjectionRunner(store, runs)
    await runner.catch_up()
    return queue, runner


async def read_view(store: EventStore, *, pricing: PricingTable, watch: ControlWatch,
                    now: float | None = None) -> Snapshot:
    """A Snapshot with its approvals panel and budgets line (`watch` reads only what
    is new since its last read)."""
    when = time.time() if now is None else now
    snapshot = await read_snapshot(store, pricing=pricing, now=when)
    approvals, budgets = await watch.read(now=when, pricing=pricing)
    return msgspec.structs.replace(snapshot, approvals=approvals, budgets=budgets)


class TopApp:
    def __init__(self, store: EventStore, queue: JobQueue, runner: ProjectionRunner, pricing: PricingTable,
                 live: Live, *, fps: float) -> None:
        self.store = store
        self.queue = queue
        self.runner = runner
        self.pricing = pricing
        self.live = live
        self.min_interval = 1.0 / fps
        self.ui = UiState()
        self.watch = ControlWatch(store)
        self.snapshot: Snapshot | None = None
        self.timeline_lines: list[str] = []
        self.stale = trio.Event()
        self.stale.set()
        self.done = trio.Event()

    # -- drawing ---------------------------------------------------------------

    def draw(self) -> None:
        height = self.live.console.size.height
        if self.ui.timeline is not None:
            view = render_timeline(self.ui.timeline, self.timeline_lines, self.ui, height=height)
        elif self.snapshot is not None:
            view = render_dashboard(self.snapshot.with_selected(self.ui.selected_job), self.ui, height=height)
        else:
            return
        self.live.update(view, refresh=True)

    def mark_stale(self) -> None:
        self.stale.set()

    async def reload(self) -> None:
        await self.runner.catch_up()
        self.snapshot = await read_view(self.store, pricing=self.pricing, watch=self.watch)
        self.ui = sync_rows(self.ui, self.snapshot)
        await self.check_receipt()
        if self.ui.timeline is not None:
            await self.load_timeline(self.ui.timeline)

    async def check_receipt(self) -> None:
        receipt = self.ui.receipt
        if receipt is None or receipt.read:
            return
        job_run = None
        if receipt.job_id is not None and self.snapshot is not None:
            job_run = next((j.run_id for j in self.snapshot.jobs if j.id == receipt.job_id), None)
        try:
            checked = await check_receipt(self.store, self.queue, receipt, job_run=job_run)
        except GormesError:
            return  # looked for again at the next refresh
        self.ui = msgspec.structs.replace(self.ui, receipt=checked)

    async def load_timeline(self, run_id: str) -> None:
        try:
            self.timeline_lines = format_view(await run_view(self.store, run_id, tree=False, table=self.pricing))
        except GormesError as exc:
            self.timeline_lines = [f"cannot show run {run_id}: {exc}"]

    # -- tasks -----------------------------------------------------------------

    async def refresh(self) -> None:
        while True:
            await self.stale.wait()
            self.stale = trio.Event()
            await self.reload()
            self.draw()
            await trio.sleep(self.min_interval)  # the throttle: at most fps frames a second

    async def follow(self) -> None:
        async for _record in self.store.subscribe(after=await self.store.head()):
            self.mark_stale()

    async def tick(self) -> None:
        with trio.open_signal_receiver(signal.SIGWINCH) as resized:
            while True:
                with trio.move_on_after(TICK_S):
                    await resized.__anext__()
                self.mark_stale()

    async def keyboard(self, fd: int) -> None:
        while not self.done.is_set():
            await trio.lowlevel.wait_readable(fd)
            data = os.read(fd, 1024)
            if not data:  # the terminal went away
                self.done.set()
                return
            for key in decode_keys(data):
                self.ui, action = handle_key(self.ui, key)
                if action is not None:
                    await self.perform(action)
                if self.done.is_set():
                    return
            self.draw()

    async def perform(self, action: Action) -> None:
        if action.kind == "quit":
            self.done.set()
            return
        if action.kind == "open" and action.run_id is not None:
            await self.load_timeline(action.run_id)
            return
        # Imported here: `gormes top --once` loads this module and never steers.
        from gormes.tools.builtin import default_registry  # lazy: see above
        from gormes.ops.executor import Executor  # lazy: see above
        from gormes.ops.spec import Caller  # lazy: see above

        executor = Executor(default_registry(), self.store, jobs=self.queue)
        operator = Caller(trust="operator", id="cli")
        if action.kind == "send":
            try:
                receipt = await send_message(executor, action, operator)
            except GormesError as exc:
                self.ui = msgspec.structs.replace(self.ui, message=f"not sent: {exc}")
            else:
                self.ui = msgspec.structs.replace(self.ui, receipt=receipt, message="")
            self.mark_stale()
            return
        if action.kind in ("approve", "deny"):
            try:
                message = await decide_approval(executor, action, operator)
            except GormesError as exc:
                message = f"not decided: {exc}"
            self.ui = msgspec.structs.replace(self.ui, message=message)
            self.mark_stale()
            return
        try:
            result = await executor.call(f"job.{action.kind}", {"id": action.job_id}, operator)
            if action.kind == "cancel":
                message = f"cancelled {', '.join(result.cancelled)}"
            else:
                message = f"{result.id} {result.status}"
        except GormesError as exc:
            message = str(exc)
        self.ui = msgspec.structs.replace(self.ui, message=message)
        self.mark_stale()

    async def run(self, fd: int) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.refresh)
            nursery.start_soon(self.follow)
            nursery.start_soon(self.tick)
            nursery.start_soon(self.keyboard, fd)
            await self.done.wait()
            nursery.cancel_scope.cancel()


def require_terminal() -> int:
    fd = sys.stdin.fileno()
    if not os.isatty(fd) or not sys.stdout.isatty():
        raise UserError("gormes top needs a terminal on stdin and stdout (use --once for a snapshot)")
    return fd


async def run_live(db: Path | str, *, pricing: PricingTable, fps: float = DEFAULT_FPS,
                   console: Console | None = None) -> None:
    """The live view of `db`, its costs priced with `pricing`."""
    fd = require_terminal()
    async with open_store(db) as store:
        queue, runner = await open_views(store)
        console = console or Console()
        with cbreak(fd), Live(console=console, screen=True, auto_refresh=False,
                  redirect_stdout=False, redirect_stderr=False) as live:
            await TopApp(store, queue, runner, pricing, live, fps=fps).run(fd)
