"""Attacks as an outsider would make them: the CLI in subprocesses, `gormes mcp`
through the real `mcp` SDK client, scripted models asking for what they may not
have. The helpers of the acceptance and MCP suites are shared here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
for folder in ("acceptance", "mcp", "ops"):
    path = str(TESTS / folder)
    if path not in sys.path:
        sys.path.insert(0, path)


@pytest.fixture
def isolated_knowledge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Knowledge indexes go to this test's data dir; no gbrain is on PATH (a test
    file takes it with `pytestmark = pytest.mark.usefixtures("isolated_knowledge")`)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("GORMES_KNOWLEDGE_INDEX", raising=False)
    monkeypatch.delenv("GORMES_KNOWLEDGE_ROOT", raising=False)
    monkeypatch.setenv("GORMES_GBRAIN", str(tmp_path / "no-such-gbrain"))
