"""Fixtures for the MCP tool-source tests: configuration files naming the real
reference servers (`mcp-server-time`, `mcp-server-git`, installed in the venv's
bin), a temp git repository, and scripted-model scripts."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

@pytest.fixture
def mcp_config(tmp_path: Path) -> Callable[..., Path]:
    """mcp_config(name={...}, ...) -> a Claude-Desktop-shaped JSON file."""
    counter = iter(range(1000))

    def write(**servers: dict[str, Any]) -> Path:
        path = tmp_path / f"mcp-{next(counter)}.json"
        path.write_text(json.dumps({"mcpServers": servers}))
        return path

    return write


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid", "HOME": str(tmp_path)}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    (repo / "hello.txt").write_text("hello\n")
    subprocess.run(["git", "-C", str(repo), "add", "hello.txt"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "first"], check=True, env=env)
    (repo / "untracked.txt").write_text("new\n")
    return repo


@pytest.fixture
def script(tmp_path: Path) -> Callable[..., str]:
    """script(agent, ...) -> "scripted:PATH" (see gormes/providers/scripted.py)."""
    counter = iter(range(1000))

    def write(*agents: dict[str, Any]) -> str:
        path = tmp_path / f"script-{next(counter)}.json"
        path.write_text(json.dumps({"agents": list(agents)}))
        return f"scripted:{path}"

    return write
