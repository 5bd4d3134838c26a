"""contrib/systemd/gormes.service: systemd's own verifier, plus the keys we promise."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "contrib" / "systemd" / "gormes.service"
INSTALLED_GORMES = "/opt/gormes/venv/bin/gormes"


def service() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive in systemd
    parser.read_string(UNIT.read_text())
    return parser["Service"]


def test_the_unit_has_the_keys_the_daemon_relies_on():
    s = service()
    assert s["Type"] == "notify"
    assert s["NotifyAccess"] == "main"
    assert s["WatchdogSec"]
    assert s["Restart"] == "on-failure"
    assert s["ProtectSystem"] == "strict"
    assert s["NoNewPrivileges"] == "yes"
    assert s["PrivateTmp"] == "yes"
    assert s["ProtectHome"] == "read-only"
    assert s["ExecStart"].split()[:2] == [INSTALLED_GORMES, "daemon"]
    assert s["ExecReload"] == "/bin/kill -HUP $MAINPID"
    # the database lives in the one writable directory
    environment = [line.split("=", 1)[1] for line in UNIT.read_text().splitlines()
                   if line.startswith("Environment=")]
    (db,) = [value.split("=", 1)[1] for value in environment if value.startswith("GORMES_DB=")]
    assert Path(db).parent == Path(s["ReadWritePaths"])


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    gormes = Path(sys.executable).parent / "gormes"
    if not gormes.exists():
        pytest.skip("the gormes entry point is not installed in this environment")
    # verify checks that ExecStart exists: point it at this environment's gormes
    unit = tmp_path / "gormes.service"
    unit.write_text(UNIT.read_text().replace(INSTALLED_GORMES, str(gormes)))
    result = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    # unknown or misspelt keys are only warnings: none may appear
    assert result.stderr.strip() == "", result.stderr
