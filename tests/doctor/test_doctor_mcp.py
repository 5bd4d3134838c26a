"""The doctor's MCP checks: given an MCP configuration, each server is started
(the real mcp-server-time) and its tools listed; one that fails is a warning, and
--offline starts none and says so."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from doctor_helpers import fresh

from gormes.doctor import exit_code, run_doctor
from gormes.health import Check
from gormes.tools.mcp.config import McpConfigError

TIME_SERVER = str(Path(sys.executable).parent / "mcp-server-time")


def config(tmp_path: Path, **servers: dict) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def mcp_results(report) -> dict:
    return {c.name: c for c in report.checks if c.category == "mcp"}


NO_OTHER_CHECKS: list[Check] = []


def test_each_server_is_started_and_one_that_fails_is_a_warning(db_path: Path, tmp_path: Path) -> None:
    path = config(tmp_path, time={"command": TIME_SERVER}, gone={"command": str(tmp_path / "absent")},
                  off={"command": "x", "enabled": False})
    report = run_doctor(fresh(db_path), checks=NO_OTHER_CHECKS, mcp_config=path)
    results = mcp_results(report)
    assert set(results) == {"mcp.time", "mcp.gone"}
    assert results["mcp.time"].status == "ok"
    assert results["mcp.time"].message == (
        "mcp server 'time' started and listed 2 tools (mcp.time.get_current_time, mcp.time.convert_time)"
    )
    gone = results["mcp.gone"]
    assert gone.status == "warn" and gone.message.startswith("mcp server 'gone' failed to start (command ")
    assert str(path) in gone.remediation
    assert report.status == "warnings" and exit_code(report) == 0


def test_offline_starts_no_server_and_says_so(db_path: Path, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    server = tmp_path / "server"
    server.write_text(f"#!/bin/sh\ntouch {marker}\nexec {TIME_SERVER}\n")
    server.chmod(0o755)
    report = run_doctor(fresh(db_path), offline=True, checks=NO_OTHER_CHECKS,
                        mcp_config=config(tmp_path, time={"command": str(server)}))
    assert mcp_results(report) == {}
    assert [(s.name, s.reason) for s in report.skipped] == [
        ("mcp.time", "starts the MCP server (--offline starts none)"),
    ]
    assert not marker.exists()


def test_a_bad_configuration_is_its_one_line(db_path: Path, tmp_path: Path) -> None:
    path = config(tmp_path, time={"command": "x", "trust": ["root"]})
    with pytest.raises(McpConfigError, match="unknown trust class 'root'"):
        run_doctor(fresh(db_path), checks=NO_OTHER_CHECKS, mcp_config=path)
