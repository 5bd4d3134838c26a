"""Helpers for the skills tests: where the fixtures are, and a copy of one."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
SHIPPED_SKILLS = REPO / "skills"
SHIPPED_EVALS = REPO / "evals" / "skills"


def fixture_copy(name: str, into: Path) -> Path:
    """A writable copy of fixture skills directory `name`."""
    target = into / name
    shutil.copytree(FIXTURES / name, target)
    return target
