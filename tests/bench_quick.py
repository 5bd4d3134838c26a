"""A benchmark's `--quick` mode run in a fresh process, as the benchmarks' smoke tests do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def quick_json(script: str, timeout: float, env: dict[str, str] | None = None) -> tuple[Any, str]:
    """(the one JSON line `benchmarks/<script> --quick` prints, its stderr); the run must
    succeed and print exactly one line."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick"],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    return json.loads(lines[0]), out.stderr
