"""Attacks as an outsider would make them: the CLI in subprocesses, `gormes mcp`
through the real `mcp` SDK client, scripted models asking for what they may not
have. The helpers of the acceptance and MCP suites are shared here."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for folder in ("acceptance", "mcp", "ops"):
    path = str(TESTS / folder)
    if path not in sys.path:
        sys.path.insert(0, path)
