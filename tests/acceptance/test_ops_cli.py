"""`gormes ops list|schema|call` through the real CLI in subprocesses."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from cli_helpers import assert_one_line_error, create_database, run_gormes

EVERYONE_BUT_OPERATOR = ["gateway", "child-agent", "system"]


@pytest.fixture
def fresh_db(tmp_path: Path) -> Path:
    # An empty database: a call of an operation that writes nothing to the log
    # makes none where there is none (decision 0089; tests/acceptance/test_db_door.py).
    db = tmp_path / "gormes.db"
    create_database(db)
    return db


def audit_rows(db: Path) -> list[dict]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT stream, data FROM events WHERE type = 'audit.operation' ORDER BY position"
        ).fetchall()
    return [{"stream": stream, **json.loads(data)} for stream, data in rows]


def test_ops_list_prints_a_table_of_every_operation(fresh_db):
    done = run_gormes(fresh_db, "ops", "list")
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0]
    for column in ("name", "trust", "mutating", "idempotent", "prompt-visible", "timeout", "audit kind"):
        assert column in header
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[2:]}
    from gormes.tools.builtin import default_registry

    assert set(rows) == {spec.name for spec in default_registry().list()}
    assert {"fs.read", "job.submit", "shell.run", "time.now"} <= set(rows)
    assert rows["shell.run"].split("│")[1].strip() == "operator"


def test_ops_list_json_filters_by_trust_and_prompt_visibility(fresh_db):
    everything = json.loads(run_gormes(fresh_db, "ops", "list", "--json").stdout)
    shell = next(op for op in everything if op["name"] == "shell.run")
    assert shell == {
        "name": "shell.run", "description": shell["description"], "trust": ["operator"],
        "mutating": True, "idempotent": False, "prompt_visible": False, "timeout": 300.0,
        "audit_kind": "shell.exec", "doctor_checks": ["shell-enabled"], "requires_approval": False,
        "operator_mcp": False, "write_ahead": True,
    }
    child = json.loads(run_gormes(fresh_db, "ops", "list", "--trust", "child-agent", "--json").stdout)
    assert "shell.run" not in {op["name"] for op in child}
    assert "job.cancel" not in {op["name"] for op in child}
    visible = json.loads(run_gormes(fresh_db, "ops", "list", "--prompt-visible", "--json").stdout)
    assert [op["name"] for op in visible] == [op["name"] for op in everything if op["prompt_visible"]]
    assert "shell.run" not in {op["name"] for op in visible}
    assert len(visible) < len(everything)


@pytest.mark.parametrize("trust", ["operator", *EVERYONE_BUT_OPERATOR])
def test_ops_schema_never_offers_an_operator_only_operation(fresh_db, trust):
    done = run_gormes(fresh_db, "ops", "schema", "--trust", trust, "--json")
    assert done.returncode == 0, done.stderr
    tools = json.loads(done.stdout)
    names = {tool["name"] for tool in tools}
    assert "shell.run" not in names
    assert {"fs.read", "fs.grep", "time.now", "job.submit"} <= names
    read = next(tool for tool in tools if tool["name"] == "fs.read")
    assert read["parameters"]["type"] == "object"
    assert read["parameters"]["required"] == ["path"]


def test_ops_schema_needs_a_known_trust_class(fresh_db):
    done = run_gormes(fresh_db, "ops", "schema", "--trust", "root")
    assert done.returncode == 2 and "root" in done.stderr and done.stdout == ""


def test_ops_call_runs_an_operation_as_the_operator_and_audits_it(fresh_db, tmp_path):
    workspace = tmp_path / "ws"
    (workspace / "docs").mkdir(parents=True)
    (workspace / "docs" / "a.md").write_text("one\nneedle here\n")
    done = run_gormes(fresh_db, "ops", "call", "fs.grep", '{"pattern": "needle"}',
                      "--workspace", str(workspace))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "matches": [{"path": "docs/a.md", "line": 2, "text": "needle here"}],
        "files_searched": 1, "truncated": False,
    }
    (row,) = audit_rows(fresh_db)
    assert row["stream"].startswith("audit-")
    assert (row["operation"], row["caller"], row["trust"], row["allowed"], row["outcome"]) == (
        "fs.grep", "cli", "operator", True, "ok",
    )


def test_ops_call_refusals_are_one_line_and_audited(fresh_db, tmp_path):
    escape = run_gormes(fresh_db, "ops", "call", "fs.read", '{"path": "../../etc/passwd"}',
                        "--workspace", str(tmp_path))
    assert "is outside the workspace" in assert_one_line_error(escape)
    shell = run_gormes(fresh_db, "ops", "call", "shell.run", '{"command": "echo hi"}')
    assert "shell.run is disabled" in assert_one_line_error(shell)
    bad = run_gormes(fresh_db, "ops", "call", "time.now", "{oops")
    assert "invalid input for time.now" in assert_one_line_error(bad)
    unknown = run_gormes(fresh_db, "ops", "call", "fs.delete", "{}")
    assert "unknown operation 'fs.delete'" in assert_one_line_error(unknown)
    assert [(r["operation"], r["outcome"]) for r in audit_rows(fresh_db)] == [
        ("fs.read", "denied"), ("shell.run", "denied"), ("time.now", "invalid"), ("fs.delete", "denied"),
    ]
