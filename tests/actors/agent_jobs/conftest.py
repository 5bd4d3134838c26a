"""The agent-job tests drive runs: they share the run tests' fixtures and helpers
(tests/actors/runs/run_fixtures.py and run_helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

RUNS = str(Path(__file__).resolve().parents[1] / "runs")
if RUNS not in sys.path:
    sys.path.insert(0, RUNS)

from run_fixtures import executor, script, workspace  # noqa: E402, F401 (fixtures)
