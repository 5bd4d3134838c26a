"""Cost and control: the local OpenAI-wire server and the CLI helpers are shared here."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for folder in ("acceptance", "doctor", "providers"):
    path = str(TESTS / folder)
    if path not in sys.path:
        sys.path.insert(0, path)
