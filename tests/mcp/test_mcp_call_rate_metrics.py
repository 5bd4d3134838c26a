"""The gateways' refused calls as an operator who runs `gormes daemon` reads them
(decision 0079): two MCP clients call `gormes mcp` processes (driven by the mcp SDK
client) past a tiny `GORMES_GATEWAY_RATE`; the daemon's `/metrics`, scraped over
HTTP, counts the refusals, and `gormes doctor --json` names the clients refused
most; on SQLite and on PostgreSQL, every part a process of its own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from mcp_helpers import call_ok, call_refused, gormes_mcp
from prometheus_client.parser import text_string_to_metric_families
from test_mcp_call_rate_views import RATE, database, doctor_check

REPO = Path(__file__).resolve().parents[2]
WAIT = 60.0  # an upper bound for anything to happen; never a measured duration
COUNTER = "gormes_gateway_call_rate_refusals_total"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def counter(port: int) -> float | None:
    """The counter, as one scrape says it; None: no answer yet, or no counter."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None
    found = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == COUNTER]
    return found[0] if found else None


def until(port: int, expected: float) -> None:
    deadline = time.monotonic() + WAIT
    while (seen := counter(port)) != expected:
        assert time.monotonic() < deadline, f"/metrics said {COUNTER} = {seen}, never {expected}"
        time.sleep(0.05)


def start_daemon(db: str, port: int, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GORMES_"))}
    env["PYTHONPATH"] = str(REPO)
    with log.open("w") as err:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "gormes", "--db", db, "daemon", "--no-governor", "--no-cron",
             "--metrics-port", str(port), "--log-format", "plain"],
            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_the_daemon_counts_the_refusals_and_the_doctor_names_the_clients(backend: str, db_path: Path,
                                                                                tmp_path: Path):
    async with database(backend, db_path) as db:
        port = free_port()
        daemon = start_daemon(db, port, tmp_path / "daemon.log")
        try:
            until(port, 0)  # nothing limited on this database yet: nothing refused
            async with gormes_mcp(db, env=RATE, client_name="bot-a") as client:
                await call_ok(client, "time__now")
                await call_ok(client, "time__now")
                for _ in range(3):
                    await call_refused(client, "time__now")
            until(port, 3)
            async with gormes_mcp(db, env=RATE, client_name="bot-b") as client:
                for _ in range(2):
                    await call_refused(client, "time__now")
            until(port, 5)
            assert counter(port) == 5  # each counted once, scrape after scrape
        finally:
            daemon.send_signal(signal.SIGTERM)
            code = daemon.wait(timeout=WAIT)
        assert code == 0, (tmp_path / "daemon.log").read_text()

        code, check = doctor_check(db)
    assert (code, check["status"]) == (0, "warn"), check
    assert check["message"].endswith('; refused most to "mcp:bot-a" (3), "mcp:bot-b" (2)'), check["message"]
    assert check["detail"] == {
        "window_s": 86400.0, "refused": 5, "refused_more": False,
        "clients": [{"client": "mcp:bot-a", "refused": 3}, {"client": "mcp:bot-b", "refused": 2}],
        "other_clients": 0, "other_refused": 0, "clients_read": 5}
