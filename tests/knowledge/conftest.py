"""Fixtures for the knowledge tests (the fake gbrain is in knowledge_fakes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from knowledge_fakes import write_notes

from gormes.knowledge.search import fallback_notice


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Indexes go to this test's data dir; the once-per-process notice starts unsaid."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("GORMES_KNOWLEDGE_INDEX", raising=False)
    monkeypatch.delenv("GORMES_KNOWLEDGE_ROOT", raising=False)
    fallback_notice.reset()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return write_notes(tmp_path / ".writ")
