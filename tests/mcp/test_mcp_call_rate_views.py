"""What an operator sees of the gateways' call rate (decision 0075): an MCP client
calls `gormes mcp` (a process, driven by the mcp SDK client) past a tiny
`GORMES_GATEWAY_RATE`, and `gormes top --once --json`, `gormes top --once` and
`gormes doctor --json`, each a process of its own, say how many calls were
refused, since when, to whom, and the limit the refusals stated; on SQLite and on
PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import CLIENT_NAME, call_ok, call_refused, gormes_mcp
from pg_helpers import fresh_schema, url_for_schema

REPO = Path(__file__).resolve().parents[2]
RATE = {"GORMES_GATEWAY_RATE": "2req/60s", "GORMES_GATEWAY_CLIENT_RATE": "off"}  # the class alone: no client share (decision 0082)


@asynccontextmanager
async def database(backend: str, db_path: Path) -> AsyncIterator[str]:
    """What `gormes --db` takes: the SQLite file, or a URL naming a fresh schema."""
    if backend == "sqlite":
        yield str(db_path)
        return
    with fresh_schema() as schema:
        yield url_for_schema(schema)


def gormes(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "220"
    for name in ("GORMES_DB", "GORMES_GATEWAY_RATE", "GORMES_GATEWAY_CLIENT_RATE"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "gormes", "--db", db, *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120, stdin=subprocess.DEVNULL, check=False)


def doctor_check(db: str) -> tuple[int, dict[str, Any]]:
    done = gormes(db, "doctor", "--json", "--offline")
    assert done.stdout, done.stderr
    (found,) = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "gateway.call_rate"]
    return done.returncode, found


def top_gateway(db: str) -> dict[str, Any] | None:
    done = gormes(db, "top", "--once", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["gateway"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_top_and_doctor_show_the_calls_the_gateways_call_rate_refused(backend: str, db_path: Path):
    async with database(backend, db_path) as db:
        async with gormes_mcp(db, env=RATE) as client:
            assert top_gateway(db) is None  # no gateway call limited yet: no line
            await call_ok(client, "time__now")
            first = top_gateway(db)  # the first call made the index, and took a lease
            assert first is not None and (first["calls_last_minute"], first["refused"]) == (1, 0), first
            await call_ok(client, "job__list")
            code, check = doctor_check(db)
            assert (code, check["status"]) == (0, "ok"), check
            assert check["message"] == ("no gateway call refused by the call rate (GORMES_GATEWAY_RATE)"
                                        " in the last 24h")
            served = top_gateway(db)
            assert served is not None
            assert (served["calls_last_minute"], served["refused"], served["limit"]) == (2, 0, None)
            refusals = [await call_refused(client, "time__now") for _ in range(3)]
        assert all("GORMES_GATEWAY_RATE=2rpm" in line for line in refusals), refusals

        code, check = doctor_check(db)
        assert (code, check["status"]) == (0, "warn"), check
        assert check["message"].startswith("3 gateway call(s) refused by the call rate in the last 24h, since ")
        assert f'to "mcp:{CLIENT_NAME}"; the process that refused it allows 2 calls a minute' \
               " (GORMES_GATEWAY_RATE=2rpm)" in check["message"]
        assert "raise GORMES_GATEWAY_RATE" in check["remediation"]

        gateway = top_gateway(db)
        assert gateway is not None
        assert {k: gateway[k] for k in ("calls_last_minute", "refused", "refused_more", "last_refused_caller",
                                        "limit", "limit_calls", "limit_window_s", "counted")} == {
            "calls_last_minute": 2, "refused": 3, "refused_more": False, "last_refused_caller": f"mcp:{CLIENT_NAME}",
            "limit": "2rpm", "limit_calls": 2, "limit_window_s": 60.0, "counted": 2}
        assert 0 <= gateway["last_refused_s_ago"] <= gateway["first_refused_s_ago"] < 60

        screen = gormes(db, "top", "--once")
        assert screen.returncode == 0, screen.stderr
        lines = screen.stdout.splitlines()
        (calls,) = [i for i, line in enumerate(lines) if line.startswith("gateway calls: ")]
        assert lines[calls].startswith("gateway calls: 2 in the last minute (the latest ")
        assert "limit 2rpm, as the latest refusal stated it: 2 of 2 counted in its window" in lines[calls]
        assert lines[calls + 1].startswith("  refused in the last hour: 3 (since ")
        assert lines[calls + 1].rstrip().endswith(f'ago, to "mcp:{CLIENT_NAME}")')
