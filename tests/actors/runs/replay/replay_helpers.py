"""Helpers for replay tests: the recorded runs of replay_fixtures/ and their manifest.

Importing this module also registers the fixtures' run handlers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gormes.actors.jobs.handlers import import_handlers
from gormes.actors.runs.context import run_handlers

REPO = Path(__file__).resolve().parents[4]
FIXTURES = REPO / "replay_fixtures"
MANIFEST: dict[str, Any] = json.loads((FIXTURES / "manifest.json").read_text())

run_handlers.names()  # the built-in "agent" first
import_handlers(str(FIXTURES / "handlers.py"))
import_handlers(str(FIXTURES / "bounded.py"))


def fixture_path(name: str) -> Path:
    return FIXTURES / MANIFEST[name]["file"]


def fixture_lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in fixture_path(name).read_text().splitlines() if line.strip()]
