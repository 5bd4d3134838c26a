"""A stdio server's bare command is found beside gormes's own Python when the PATH
lacks it: the README's `mcp.json` names `mcp-server-time`, which `make demo`
installs into `.venv/bin`, and the quick start runs `.venv/bin/gormes` without
activating the venv. A user audit found the server "failed to start (command
'mcp-server-time'): FileNotFoundError" there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from gormes.tools.mcp.command import resolved

REPO = Path(__file__).resolve().parents[3]
VENV_SERVER = str(Path(sysconfig.get_path("scripts")) / "mcp-server-time")
BARE_PATH = "/usr/bin:/bin"


def test_a_bare_name_not_on_the_path_is_found_in_this_pythons_scripts() -> None:
    assert Path(VENV_SERVER).exists(), "the test's venv holds the reference server"
    assert resolved("mcp-server-time", {"PATH": BARE_PATH}) == VENV_SERVER
    assert resolved("mcp-server-time", {"PATH": os.path.dirname(VENV_SERVER)}) == "mcp-server-time"  # as given
    assert resolved("./mcp-server-time", {"PATH": BARE_PATH}) == "./mcp-server-time"  # a path is a path
    assert resolved("no-such-server", {"PATH": BARE_PATH}) == "no-such-server"  # fails to start, named as given


def test_the_readmes_configuration_runs_with_a_path_that_lacks_the_venv(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"time": {"command": "mcp-server-time",
                                                          "trust": ["operator", "child-agent"]}}}))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "GORMES_DB")}
    env.update(PATH=BARE_PATH, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-m", "gormes", "--db", str(tmp_path / "g.db"), "ops", "call",
         "mcp.time.get_current_time", '{"timezone": "UTC"}', "--mcp-config", str(config)],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "UTC" in done.stdout and done.stderr == "", (done.stdout, done.stderr)
