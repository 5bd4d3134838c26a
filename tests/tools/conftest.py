"""The built-in operations' tests share the kernel tests' helpers (tests/ops/ops_helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

OPS = str(Path(__file__).resolve().parents[1] / "ops")
if OPS not in sys.path:
    sys.path.insert(0, OPS)
