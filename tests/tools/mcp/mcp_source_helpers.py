"""Where the reference MCP servers are: the venv's bin, beside this Python."""

from __future__ import annotations

import sys
from pathlib import Path

BIN = Path(sys.executable).parent
TIME_SERVER = str(BIN / "mcp-server-time")
GIT_SERVER = str(BIN / "mcp-server-git")
