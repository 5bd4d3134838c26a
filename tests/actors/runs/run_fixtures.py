"""The run tests' fixtures, shared by tests/actors/runs and tests/actors/agent_jobs
(each conftest imports them): a workspace with files, the real ops executor over
the store, and `script(...)`, which writes a `scripted:` model script."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "notes").mkdir(parents=True)
    (root / "README.md").write_text("gormes: every step is an event\n")
    (root / "notes" / "a.txt").write_text("alpha\n")
    return root


@pytest.fixture
def executor(store, workspace: Path):
    from gormes.tools.builtin import default_registry
    from gormes.ops.executor import Executor

    return Executor(default_registry(), store, workspace=workspace, shell_enabled=True)


@pytest.fixture
def script(tmp_path: Path) -> Callable[..., str]:
    """script(agent, agent, ...) -> "scripted:PATH"; each agent is
    {"match": text?, "replies": [...]} (see the scripted provider)."""
    counter = iter(range(1000))

    def write(*agents: dict[str, Any]) -> str:
        path = tmp_path / f"script-{next(counter)}.json"
        path.write_text(json.dumps({"agents": list(agents)}))
        return f"scripted:{path}"

    return write
