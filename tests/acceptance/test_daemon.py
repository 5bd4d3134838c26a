"""`gormes daemon` under a pretend systemd: the test binds the notify socket,
starts the daemon in a subprocess with NOTIFY_SOCKET and WATCHDOG_USEC, and reads
what it says. Jobs wait on files the test creates, so nothing depends on timing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_helpers import REPO, cli_env, gormes_command, run_gormes

pytestmark = pytest.mark.slow

WAIT = 60.0  # generous upper bound for anything to happen; never a measured duration

HANDLERS = '''
import pathlib

import trio

from gormes.actors.jobs.handlers import job


@job("gate")
async def gate(ctx, data):
    """Finish once the file data["path"] exists."""
    path = pathlib.Path(data["path"])
    while not path.exists():
        await trio.sleep(0.01)
    return {"opened": True}


@job("version")
async def version(ctx, data):
    return "VERSION"
'''


class PretendSystemd:
    """The receiving end of NOTIFY_SOCKET: every datagram, in order of arrival."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(b"\0" + address[1:].encode() if address.startswith("@") else address)
        self.messages: list[dict[str, str]] = []

    def wait_for(self, want: Callable[[dict[str, str]], bool], what: str, after: int = -1) -> int:
        """The index of the first message after `after` (already received or
        arriving) that `want`s."""
        for i, message in enumerate(self.messages):
            if i > after and want(message):
                return i
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                raw = self.sock.recv(4096)
            except TimeoutError:
                break
            fields = dict(line.split("=", 1) for line in raw.decode().splitlines() if "=" in line)
            self.messages.append(fields)
            if want(fields):
                return len(self.messages) - 1
        raise AssertionError(f"systemd never heard {what}; last heard {self.messages[-10:]}")

    def index(self, key: str, value: str = "1", after: int = -1) -> int:
        return self.wait_for(lambda m: m.get(key) == value, f"{key}={value}", after)

    def close(self) -> None:
        self.sock.close()


class Daemon:
    def __init__(self, db: Path, notify: str, tmp: Path, *args: str) -> None:
        env = cli_env()
        env.update(NOTIFY_SOCKET=notify, WATCHDOG_USEC="400000")
        env.pop("JOURNAL_STREAM", None)
        self.stderr_path = tmp / f"daemon-{uuid.uuid4().hex[:6]}.log"
        self.stderr = self.stderr_path.open("w")
        self.proc = subprocess.Popen(
            gormes_command(db, "daemon", "--no-governor", "--status-interval", "0.2", *args),
            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=self.stderr,
        )

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self) -> int:
        code = self.proc.wait(timeout=WAIT)
        self.stderr.close()
        return code

    @property
    def log(self) -> str:
        return self.stderr_path.read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


@pytest.fixture
def systemd(tmp_path: Path) -> Iterator[PretendSystemd]:
    pretend = PretendSystemd(str(tmp_path / "notify.sock"))
    yield pretend
    pretend.close()


@pytest.fixture
def handlers(tmp_path: Path) -> Path:
    path = tmp_path / "handlers.py"
    path.write_text(HANDLERS.replace("VERSION", "v1"))
    return path


def submit(db: Path, name: str, data: dict) -> str:
    result = run_gormes(db, "jobs", "submit", name, "--data", json.dumps(data), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["id"]


def job(db: Path, job_id: str) -> dict:
    result = run_gormes(db, "jobs", "get", job_id, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def wait_status(db: Path, job_id: str, status: str) -> dict:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = job(db, job_id)
        if found["status"] == status:
            return found
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never became {status}: {found}")


def test_ready_watchdog_stopping_and_a_drain_that_releases_the_rest(
    tmp_path: Path, systemd: PretendSystemd, handlers: Path
):
    db = tmp_path / "gormes.db"
    opened, never = tmp_path / "open-short", tmp_path / "open-long"
    daemon = Daemon(db, systemd.address, tmp_path, "--import", str(handlers),
                    "--shutdown-grace", "2000")
    try:
        ready = systemd.index("READY")
        watchdog = systemd.index("WATCHDOG", after=ready)
        short = submit(db, "gate", {"path": str(opened)})
        long = submit(db, "gate", {"path": str(never)})
        wait_status(db, short, "active")
        before = wait_status(db, long, "active")
        systemd.wait_for(lambda m: "active jobs" in m.get("STATUS", "") and
                         m["STATUS"].count("2 active") == 1, "STATUS with 2 active jobs")

        daemon.signal(signal.SIGTERM)
        stopping = systemd.index("STOPPING", after=watchdog)
        opened.touch()  # the short job may finish only now, after SIGTERM
        assert daemon.wait() == 0, daemon.log
    finally:
        daemon.kill()

    assert ready < watchdog < stopping
    assert job(db, short)["status"] == "completed"
    assert job(db, short)["result"] == {"opened": True}
    released = job(db, long)
    assert released["status"] == "waiting"
    assert released["attempts_made"] == before["attempts_made"]
    assert released["worker_id"] is None
    events = run_gormes(db, "events", "--stream", f"job-{long}", "--json")
    assert "job.released" in events.stdout, events.stdout
    assert "Traceback" not in daemon.log
    assert "releasing 1 in-flight job" in daemon.log

    # Another daemon reclaims the released job and finishes it.
    never.touch()
    second = Daemon(db, systemd.address, tmp_path, "--import", str(handlers))
    try:
        finished = wait_status(db, long, "completed")
        # one attempt in all: the released one did not count
        assert finished["attempts_made"] == before["attempts_made"] + 1
        second.signal(signal.SIGTERM)
        assert second.wait() == 0, second.log
    finally:
        second.kill()


def test_sighup_reloads_handler_modules(tmp_path: Path, handlers: Path):
    # The abstract namespace ('@'), as systemd itself uses.
    systemd = PretendSystemd(f"@gormes-test-{uuid.uuid4().hex}")
    db = tmp_path / "gormes.db"
    daemon = Daemon(db, systemd.address, tmp_path, "--import", str(handlers))
    try:
        ready = systemd.index("READY")
        first = submit(db, "version", {})
        assert wait_status(db, first, "completed")["result"] == "v1"

        handlers.write_text(HANDLERS.replace("VERSION", "v2"))
        daemon.signal(signal.SIGHUP)
        reloading = systemd.index("RELOADING", after=ready)
        ready_again = systemd.index("READY", after=reloading)
        assert "MONOTONIC_USEC" in systemd.messages[reloading]
        second = submit(db, "version", {})
        assert wait_status(db, second, "completed")["result"] == "v2"

        daemon.signal(signal.SIGTERM)
        systemd.index("STOPPING", after=ready_again)
        assert daemon.wait() == 0, daemon.log
    finally:
        daemon.kill()
        systemd.close()
    assert "reloaded" in daemon.log


def test_a_reload_that_fails_keeps_the_running_handlers(
    tmp_path: Path, systemd: PretendSystemd, handlers: Path
):
    db = tmp_path / "gormes.db"
    daemon = Daemon(db, systemd.address, tmp_path, "--import", str(handlers))
    try:
        ready = systemd.index("READY")
        handlers.write_text("this is not python (\n")
        daemon.signal(signal.SIGHUP)
        reloading = systemd.index("RELOADING", after=ready)
        after = systemd.index("READY", after=reloading)
        assert systemd.messages[after]["STATUS"].startswith("reload failed: cannot import handlers")
        done = submit(db, "version", {})
        assert wait_status(db, done, "completed")["result"] == "v1"
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0, daemon.log
    finally:
        daemon.kill()


def test_a_bad_import_is_one_line_before_the_database_is_touched(tmp_path: Path):
    db = tmp_path / "gormes.db"
    result = run_gormes(db, "daemon", "--import", "no_such_module_anywhere")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines == [lines[0]] and lines[0].startswith("gormes: error: cannot import handlers")
    assert not db.exists()


def test_without_notify_socket_it_runs_and_stops_quietly(tmp_path: Path):
    db = tmp_path / "gormes.db"
    env = cli_env()
    env.pop("NOTIFY_SOCKET", None)
    proc = subprocess.Popen(gormes_command(db, "daemon", "--no-governor"), env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # "ready:" is logged once READY would have been sent
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if " ready: " in line:
                break
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=WAIT)[1]
        assert proc.returncode == 0, "".join(lines) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert " INFO gormes.daemon: ready: queue depth 0 waiting" in "".join(lines)
    assert os.path.exists(db)
