"""A write-ahead operation (decision 0062) through the doors other than the
operator's CLI: `knowledge.write` called by an MCP client of `gormes mcp`, and by
a scripted model inside an agent job that a worker runs. Each call is its
`started` record, then its outcome naming it (`started_position`), both of the
same caller, input and run."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import assert_job_completes, cli_env, gormes_command, REPO, rows, run_gormes
from mcp_helpers import CLIENT_NAME, call_ok, gormes_mcp
from test_attack_audit_sealed import scripted

pytestmark = pytest.mark.usefixtures("isolated_knowledge")


def knowledge(tmp_path: Path) -> dict[str, str]:
    return {"GORMES_KNOWLEDGE_ROOT": str(tmp_path / "knowledge"), "XDG_DATA_HOME": str(tmp_path / "data"),
            "GORMES_GBRAIN": str(tmp_path / "no-such-gbrain")}


def knowledge_writes(db: Path) -> list[tuple[int, dict[str, Any]]]:
    found = rows(db, "SELECT position, data FROM events WHERE type = 'audit.operation'"
                     " AND json_extract(data, '$.operation') = 'knowledge.write' ORDER BY position")
    return [(position, json.loads(data)) for position, data in found]


def started_then_named(db: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The one knowledge.write call's two records: `started`, then its outcome naming it."""
    [(position, started), (_, outcome)] = knowledge_writes(db)
    assert (started["outcome"], started["allowed"], started.get("started_position")) == ("started", True, None)
    assert (outcome["outcome"], outcome["started_position"]) == ("ok", position)
    for field in ("caller", "trust", "input_sha256", "run_id", "job_id"):
        assert started.get(field) == outcome.get(field), field
    assert run_gormes(db, "audit", "unfinished").stdout == "no call without its outcome\n"
    assert run_gormes(db, "audit", "verify").returncode == 0
    return started, outcome


async def test_an_mcp_clients_knowledge_write_is_started_then_its_outcome(tmp_path: Path, db_path: Path):
    env = {**knowledge(tmp_path), "PYTHONPATH": str(REPO)}
    async with gormes_mcp(db_path, "--trust", "child-agent", env=env) as client:
        await call_ok(client, "knowledge__write", path="mcp.md", text="# From MCP\n")
    assert (tmp_path / "knowledge" / "mcp.md").read_text() == "# From MCP\n"
    started, _ = started_then_named(db_path)
    assert (started["caller"], started["trust"]) == (f"mcp:{CLIENT_NAME}", "child-agent")


def test_an_agent_jobs_knowledge_write_is_started_then_its_outcome_with_its_run(tmp_path: Path):
    db = tmp_path / "g.db"
    model = scripted(tmp_path, "m", [
        {"tool_calls": [{"name": "knowledge.write", "arguments": {"path": "job.md", "text": "# From a job\n"}}]},
        {"text": "noted"}])
    submitted = run_gormes(db, "jobs", "submit", "agent", "--data", json.dumps(
        {"prompt": "note it", "model": model, "tools": ["knowledge.write"]}))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    worker = subprocess.Popen(gormes_command(db, "worker", "--concurrency", "1", "--no-governor"),
                              env={**cli_env(), **knowledge(tmp_path)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert_job_completes(db, job_id)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    assert (tmp_path / "knowledge" / "job.md").read_text() == "# From a job\n"
    started, _ = started_then_named(db)
    [(stream,)] = rows(db, "SELECT stream FROM events WHERE type = 'run.started'")
    assert (started["run_id"], started["job_id"]) == (stream.removeprefix("run-"), job_id)
    # the outcome went to the log with the run's record of the call, in its transaction
    [(called_at, called)] = rows(db, "SELECT position, data FROM events WHERE type = 'run.tool_called'")
    assert (json.loads(called)["operation"], json.loads(called)["outcome"]) == ("knowledge.write", "ok")
    assert knowledge_writes(db)[-1][0] == called_at - 1
