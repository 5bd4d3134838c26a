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
    from gormes.actors.queue import JobQueue
    from gormes.events.sqlite import SQLiteEventStore

    async def main() -> str:
        async with SQLiteEventStore.open(db) as store:
            queue = await JobQueue.open(store)
            return (await queue.submit("echo", {"hello": "top"}, {"queue": "inbox"})).id

    return trio.run(main)


def test_top_in_a_terminal_pauses_the_selected_job_then_quits_and_restores_it(tmp_path: Path):
    db = tmp_path / "gormes.db"
    job_id = submit_waiting_job(db)
    assert job_status(db, job_id) == "waiting"

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    before = termios.tcgetattr(slave)
    env = cli_env()
    env.pop("COLUMNS", None)
    env.update(TERM="xterm-256color", LINES=str(ROWS), COLUMNS=str(COLS))
    output = PtyOutput(master)
    proc = subprocess.Popen(
        gormes_command(db, "top"), stdin=slave, stdout=slave, stderr=slave, env=env, cwd=REPO,
        start_new_session=True,
    )
    try:
        output.wait_for(job_id.encode())  # the dashboard is up and lists the waiting job
        assert b"paused" not in output.bytes()
        pressed_at = len(output.bytes())
        os.write(master, b"p")  # the only job is the selected one
        wait_until(lambda: job_status(db, job_id) == "paused", "the job paused in the database",
                   output.bytes)
        output.wait_for(b"paused", after=pressed_at)  # and the screen says so
        os.write(master, b"q")
        returncode = proc.wait(timeout=WAIT_S)
        after = termios.tcgetattr(slave)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT_S)
        output.stop()
        os.close(slave)
        os.close(master)

    screen = output.bytes()
    assert returncode == 0, screen[-2000:]
    assert b"Traceback" not in screen
    assert after == before  # termios settings back as they were: echo and line mode on
    assert after[3] & termios.ECHO and after[3] & termios.ICANON
    assert screen.rfind(b"\x1b[?1049l") > screen.rfind(b"\x1b[?1049h") >= 0  # left the alternate screen
    assert screen.rfind(b"\x1b[?25h") > screen.rfind(b"\x1b[?25l") >= 0  # the cursor is shown again
    assert job_status(db, job_id) == "paused"
