"""test_attack_audit_write_ahead.py on PostgreSQL: the real CLI, `--db
postgresql://...` naming a fresh schema, killed by the command it ran or
SIGKILLed right after its effect, still left its `started` record. Skipped, with
the reason, only when the server cannot be reached."""

from __future__ import annotations

from pathlib import Path

import pytest
from pg_helpers import pg_rows, schema_url  # noqa: F401 - schema_url is the `url` fixture
from test_attack_audit_sealed import ok, scripted
from test_attack_audit_write_ahead import (
    gormes_killed, killed_after, knowledge_env, knowledge_written, left_unfinished, shell_killing_gormes,
)

pytestmark = pytest.mark.usefixtures("isolated_knowledge")


def pg_audits(url: str) -> list[tuple]:
    return pg_rows(url, "SELECT data::jsonb->>'operation', data::jsonb->>'outcome' FROM events"
                        " WHERE type = 'audit.operation' ORDER BY position")


def test_a_command_that_kills_gormes_still_left_its_started_record(url: str, tmp_path: Path) -> None:
    ok(url, "jobs", "submit", "first")  # the schema exists
    shell_killing_gormes(url, tmp_path)
    assert pg_audits(url)[-1:] == [("shell.run", "started")]
    left_unfinished(url, "shell.run")


def test_a_knowledge_write_killed_after_its_file_left_its_started_record(url: str, tmp_path: Path) -> None:
    ok(url, "jobs", "submit", "first")
    knowledge_written(url, tmp_path)
    assert pg_audits(url)[-1:] == [("knowledge.write", "started")]
    left_unfinished(url, "knowledge.write")


def test_a_runs_knowledge_write_killed_after_its_file_left_its_started_record(url: str, tmp_path: Path) -> None:
    model = scripted(tmp_path, "m", [
        {"tool_calls": [{"name": "knowledge.write", "arguments": {"path": "run.md", "text": "# From a run\n"}}]},
        {"text": "done"}])
    gormes_killed(url, killed_after("gormes.tools.knowledge", "write_knowledge"),
                  "run", "agent", "--prompt", "note it", "--model", model, env=knowledge_env(tmp_path))
    assert (tmp_path / "knowledge" / "run.md").read_text() == "# From a run\n"
    assert pg_rows(url, "SELECT count(*) FROM events WHERE type = 'run.tool_called'") == [(0,)]
    assert pg_audits(url)[-1:] == [("knowledge.write", "started")]
    left_unfinished(url, "knowledge.write")


def test_a_mirror_killed_after_its_files_left_its_started_record(url: str, tmp_path: Path) -> None:
    ok(url, "memory", "add-entity", "Ada")
    out = tmp_path / "mirror"
    gormes_killed(url, killed_after("gormes.tools.memory_admin", "mirror_store"), "memory", "mirror", "--out", str(out))
    assert (out / "USER.md").exists()
    assert pg_audits(url)[-1:] == [("memory.mirror", "started")]
    left_unfinished(url, "memory.mirror")


def test_a_rebuild_killed_after_its_tables_left_its_started_record(url: str, tmp_path: Path) -> None:
    ok(url, "jobs", "submit", "first")
    gormes_killed(url, killed_after("gormes.tools.projections_admin", "rebuild_store"),
                  "projections", "rebuild", "streams")
    assert pg_audits(url)[-1:] == [("projections.rebuild", "started")]
    left_unfinished(url, "projections.rebuild")
