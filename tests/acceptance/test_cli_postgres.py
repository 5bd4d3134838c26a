"""The everyday commands on PostgreSQL: the real `gormes` CLI in subprocesses,
`--db postgresql://...` naming a fresh schema per test.

cron, run/runs/replay/fork, export/import of a run, ops call, skills route
(recording a selection) and an MCP client over stdio submitting and listing a
job. Each subprocess runs in the test's tmp dir, never the repo. Skipped, with
the reason, only when the server cannot be reached.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_helpers import fresh_schema, url_for_schema

from cli_helpers import cli_env, gormes_command


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_schema() as name:
        yield url_for_schema(name)


def gormes(url: str, cwd: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        gormes_command(url, *args), capture_output=True, text=True, env=cli_env(),
        timeout=timeout, cwd=cwd,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


# -- cron ---------------------------------------------------------------------


def test_cron_add_list_pause_resume_remove(url: str, tmp_path: Path):
    added = ok(gormes(url, tmp_path, "cron", "add", "nightly", "--schedule", "0 3 * * *",
                      "--job", "report", "--data", '{"full": true}', "--queue", "ops"))
    assert added.startswith("added nightly: 0 3 * * * -> report on queue ops; next fire ")

    rows = json.loads(ok(gormes(url, tmp_path, "cron", "list", "--json")))
    assert [(r["name"], r["schedule"], r["job"], r["data"], r["queue"], r["status"], r["fires"])
            for r in rows] == [("nightly", "0 3 * * *", "report", {"full": True}, "ops", "active", 0)]
    assert rows[0]["next_fire"].endswith("03:00:00Z")

    assert ok(gormes(url, tmp_path, "cron", "pause", "nightly")) == "paused nightly (now paused)\n"
    table = ok(gormes(url, tmp_path, "cron", "list"))
    assert "nightly" in table and "paused" in table
    assert ok(gormes(url, tmp_path, "cron", "resume", "nightly")) == "resumed nightly (now active)\n"
    assert ok(gormes(url, tmp_path, "cron", "remove", "nightly")) == "removed nightly (now removed)\n"
    assert ok(gormes(url, tmp_path, "cron", "list")) == "no schedules\n"
    assert list(tmp_path.iterdir()) == []  # no SQLite file was made anywhere
