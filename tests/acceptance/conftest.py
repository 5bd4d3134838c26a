"""Fixtures for acceptance tests (helpers are in cli_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import SAMPLE, mounted_tmpfs, write_notes


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A database file holding the SAMPLE notes at positions 1..4."""
    path = tmp_path / "gormes.db"
    write_notes(path, SAMPLE)
    return path


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs mounted for this test (we run as root); skipped if not allowed."""
    yield from mounted_tmpfs(tmp_path, "512k")
