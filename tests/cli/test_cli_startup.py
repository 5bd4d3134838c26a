"""`gormes --help` stays fast: no heavy module is imported to print it, and every
command of this group is registered and documents its output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("trio", "rich", "msgspec", "sqlite3", "gormes.events")
COMMANDS = ("events", "tail", "append", "import", "export", "types", "query")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=60)


def test_help_imports_no_heavy_module() -> None:
    result = run("-X", "importtime", "-m", "gormes", "--help")
    assert result.returncode == 0
    imported = [line.split("|")[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")]
    assert "gormes.cli.main" in imported
    heavy = [m for m in imported if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]
    assert heavy == []
    for command in COMMANDS:
        assert f"  {command} " in result.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_has_help(command: str) -> None:
    result = run("-m", "gormes", command, "--help")
    assert result.returncode == 0, result.stderr
    assert f"Usage: gormes {command}" in result.stdout


def test_json_help_says_json_lines() -> None:
    for command in ("events", "tail"):
        text = " ".join(run("-m", "gormes", command, "--help").stdout.split())
        assert "JSON object per line" in text or "JSON lines" in text
