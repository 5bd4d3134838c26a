"""`gormes top` driven once in a real terminal (a pty): it shows a waiting job,
`p` pauses it in the database, `q` quits with 0 and the terminal is restored.

Every wait is bounded; nothing asserts on how long anything took.
"""

from __future__ import annotations

import fcntl
import os
import select
import sqlite3
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import trio
from cli_helpers import REPO, cli_env, gormes_command

WAIT_S = 30.0
ROWS, COLS = 45, 150


class PtyOutput:
    """Everything the program wrote to the terminal, read by a thread so it never blocks."""

    def __init__(self, master: int) -> None:
        self._master = master
        self._data = bytearray()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._master], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(self._master, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self._data += chunk

    def bytes(self) -> bytes:
        with self._lock:
            return bytes(self._data)

    def wait_for(self, needle: bytes, after: int = 0) -> None:
        wait_until(lambda: needle in self.bytes()[after:], f"{needle!r} on the screen", self.bytes)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT_S)


def wait_until(predicate: Callable[[], bool], what: str, output: Callable[[], bytes]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {what}; the terminal got:\n{output()[-3000:]!r}")
        time.sleep(0.05)


def job_status(db: Path, job_id: str) -> str | None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
    finally:
        conn.close()
    return None if row is None else row[0]


def submit_waiting_job(db: Path) -> str:
    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.sqlite import SQLiteEventStore

    async def main() -> str:
        async with SQLiteEventStore.open(db) as store:
            queue = await JobQueue.open(store)
            return (await queue.submit("echo", {"hello": "top"}, {"queue": "inbox"})).id

    return trio.run(main)


class Terminal:
    """`gormes top` on a fresh pty; `close()` returns (exit code, termios before, after, output)."""

    def __init__(self, db: Path) -> None:
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        self.before = termios.tcgetattr(self.slave)
        env = cli_env()
        env.update(TERM="xterm-256color", LINES=str(ROWS), COLUMNS=str(COLS))
        self.output = PtyOutput(self.master)
        self.proc = subprocess.Popen(
            gormes_command(db, "top"), stdin=self.slave, stdout=self.slave, stderr=self.slave,
            env=env, cwd=REPO, start_new_session=True,
        )

    def press(self, keys: bytes) -> int:
        """Send keys; returns how much output there was before them."""
        mark = len(self.output.bytes())
        os.write(self.master, keys)
        return mark

    def close(self) -> tuple[int | None, list, list, bytes]:
        try:
            returncode = self.proc.wait(timeout=WAIT_S)
            after = termios.tcgetattr(self.slave)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=WAIT_S)
            self.output.stop()
            os.close(self.slave)
            os.close(self.master)
        return returncode, self.before, after, self.output.bytes()


def record_agent_run(db: Path) -> tuple[str, str]:
    """A claimed job with a recorded run that called a tool."""
    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.runs import RunStarted, RunToolCalled, run_stream
    from gormes.events.sqlite import SQLiteEventStore

    async def main() -> tuple[str, str]:
        async with SQLiteEventStore.open(db) as store:
            queue = await JobQueue.open(store)
            job = await queue.submit("agent", {"prompt": "look"})
            await queue.claim({"agent"}, worker_id="w-1")
            await store.append(run_stream("RUNTOP1"), [
                RunStarted(run_id="RUNTOP1", handler="agent", handler_version="v", job_id=job.id),
                RunToolCalled(seq=1, operation="fs.list", arguments="{}", args_hash="a",
                              outcome="ok", result=["notes"]),
            ], expected_version=0)
            return job.id, "RUNTOP1"

    return trio.run(main)


def test_enter_opens_the_selected_jobs_run_timeline_and_esc_goes_back(tmp_path: Path):
    db = tmp_path / "gormes.db"
    job_id, run_id = record_agent_run(db)
    term = Terminal(db)
    try:
        term.output.wait_for(job_id.encode())
        mark = term.press(b"\r")
        term.output.wait_for(f"run {run_id}".encode(), after=mark)  # the timeline's title
        term.output.wait_for(b"run.tool_called", after=mark)
        mark = term.press(b"\x1b")
        term.output.wait_for(b"active runs", after=mark)  # the dashboard again
    finally:
        term.press(b"q")
        returncode, before, after, screen = term.close()
    assert returncode == 0, screen[-2000:]
    assert after == before


def test_top_in_a_terminal_pauses_the_selected_job_then_quits_and_restores_it(tmp_path: Path):
    db = tmp_path / "gormes.db"
    job_id = submit_waiting_job(db)
    assert job_status(db, job_id) == "waiting"
    term = Terminal(db)
    try:
        term.output.wait_for(job_id.encode())  # the dashboard is up and lists the waiting job
        assert b"paused" not in term.output.bytes()
        mark = term.press(b"p")  # the only job is the selected one
        wait_until(lambda: job_status(db, job_id) == "paused", "the job paused in the database",
                   term.output.bytes)
        term.output.wait_for(b"paused", after=mark)  # and the screen says so
    finally:
        term.press(b"q")
        returncode, before, after, screen = term.close()

    assert returncode == 0, screen[-2000:]
    assert b"Traceback" not in screen
    assert after == before  # termios settings back as they were: echo and line mode on
    assert after[3] & termios.ECHO and after[3] & termios.ICANON
    assert screen.rfind(b"\x1b[?1049l") > screen.rfind(b"\x1b[?1049h") >= 0  # left the alternate screen
    assert screen.rfind(b"\x1b[?25h") > screen.rfind(b"\x1b[?25l") >= 0  # the cursor is shown again
    assert job_status(db, job_id) == "paused"


def request_approval(db: Path) -> str:
    """A pending approval request, as a run's call of a gated operation records it."""
    from gormes.events.approvals import APPROVALS_STREAM, ApprovalRequested
    from gormes.events.sqlite import SQLiteEventStore

    async def main() -> str:
        async with SQLiteEventStore.open(db) as store:
            await store.append(APPROVALS_STREAM, [ApprovalRequested(
                approval_id="APPROVALTTY1", operation="shell.run", arguments="{}", args_hash="h",
                run_id="RUNASKS1", caller="run-RUNASKS1", trust="operator", why="deployment rule 'shell.*'", at=1,
            )])
        return "APPROVALTTY1"

    return trio.run(main)


def approval_status(db: Path, approval_id: str) -> str | None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT type, data FROM events WHERE stream = 'approvals' ORDER BY version").fetchall()
    finally:
        conn.close()
    decided = [d for t, d in rows if t == "approval.decided" and approval_id in d]
    return None if not decided else ("approved" if '"approved"' in decided[0] else "other")


def test_a_pending_approval_is_approved_from_top_with_a_reason(tmp_path: Path):
    db = tmp_path / "gormes.db"
    approval_id = request_approval(db)
    term = Terminal(db)
    try:
        term.output.wait_for(b"approvals pending (1)")
        mark = term.press(b"\t\ta")  # the approvals pane; a: approve the selected request
        term.output.wait_for(f"approve {approval_id}, because".encode(), after=mark)
        term.press(b"fine by me\r")
        wait_until(lambda: approval_status(db, approval_id) == "approved", "the approval decided in the database",
                   term.output.bytes)
    finally:
        term.press(b"q")
        returncode, before, after, screen = term.close()
    assert returncode == 0, screen[-2000:]
    assert after == before
