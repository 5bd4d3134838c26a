"""Fixtures for replay tests (helpers are in replay_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import replay_helpers  # noqa: F401  (registers the fixtures' run handlers)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace of our own for runs recorded during a test."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "README.md").write_text("gormes: every step is an event\n")
    (root / "notes.txt").write_text("alpha\nbeta\n")
    return root
