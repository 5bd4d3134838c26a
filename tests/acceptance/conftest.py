"""Fixtures for acceptance tests (helpers are in cli_helpers.py)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import SAMPLE, write_notes


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A database file holding the SAMPLE notes at positions 1..4."""
    path = tmp_path / "gormes.db"
    write_notes(path, SAMPLE)
    return path


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs mounted for this test (we run as root); skipped if not allowed."""
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount_point)],
        capture_output=True, text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)
