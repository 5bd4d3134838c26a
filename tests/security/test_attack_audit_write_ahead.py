"""A call whose change no log transaction covers leaves a trace however its process
dies (decision 0062). `shell.run` whose command kills gormes (`kill -9 $PPID`),
and a `knowledge.write` (the operator's, and a run's tool call), a `memory
mirror` and a `projections rebuild` each SIGKILLed right after its effect and
before its outcome record: the `started` record committed before the handler ran
is there, `gormes audit unfinished` lists it as started with no outcome recorded,
and the chain verifies. (The executor used to append the one record after the
handler returned: such a kill left the effect with no audit trace at all.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import REPO, cli_env, rows
from test_attack_audit_sealed import PREAMBLE, RUN, ok, scripted

pytestmark = pytest.mark.usefixtures("isolated_knowledge")


def killed_after(module: str, name: str) -> str:
    """A hook: `module.name` (an async function, the handler's effect) runs, then
    the process SIGKILLs itself, before the executor can record the outcome."""
    return f"""
import {module} as target
effect = target.{name}

async def then_killed(*args, **kwargs):
    await effect(*args, **kwargs)
    killed_now()

target.{name} = then_killed
"""


def gormes_killed(db: Path | str, hook: str, *args: str, env: dict[str, str] | None = None) -> None:
    child = subprocess.run([sys.executable, "-c", PREAMBLE + hook + RUN, str(db), *args],
                           env={**cli_env(), **(env or {})}, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr


def sqlite_audits(db: Path | str) -> list[tuple]:
    return rows(db, "SELECT json_extract(data, '$.operation'), json_extract(data, '$.outcome') FROM events"
                    " WHERE type = 'audit.operation' ORDER BY position")


def left_unfinished(db: Path | str, operation: str) -> dict:
    """The call `gormes audit unfinished` lists (the only one), the chain intact."""
    [line] = ok(db, "audit", "unfinished").splitlines()
    assert f"  {operation}  " in line and line.endswith("started, no outcome recorded")
    [listed] = [json.loads(x) for x in ok(db, "audit", "unfinished", "--json").splitlines()]
    assert (listed["operation"], listed["outcome"], listed["allowed"]) == (operation, "started", True)
    ok(db, "audit", "verify")
    return listed


SHELL_ON = {"GORMES_SHELL_ENABLED": "1"}


def shell_killing_gormes(db: Path | str, tmp_path: Path) -> Path:
    """`shell.run` of a command that does its work, then kills gormes (its parent)."""
    done = tmp_path / "done"
    command = json.dumps({"command": f"echo did it > {done}; kill -9 $PPID"})
    gormes_killed(db, "", "ops", "call", "shell.run", command, env=SHELL_ON)
    assert done.read_text() == "did it\n"
    return done


def knowledge_env(tmp_path: Path) -> dict[str, str]:
    return {"GORMES_KNOWLEDGE_ROOT": str(tmp_path / "knowledge")}


def knowledge_written(db: Path | str, tmp_path: Path) -> None:
    page = json.dumps({"path": "decisions.md", "text": "# We chose PostgreSQL\n"})
    gormes_killed(db, killed_after("gormes.tools.knowledge", "write_knowledge"),
                  "ops", "call", "knowledge.write", page, env=knowledge_env(tmp_path))
    assert (tmp_path / "knowledge" / "decisions.md").read_text() == "# We chose PostgreSQL\n"


def test_a_command_that_kills_gormes_still_left_its_started_record(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    ok(db, "jobs", "submit", "first")  # the database exists
    shell_killing_gormes(db, tmp_path)
    assert sqlite_audits(db)[-1:] == [("shell.run", "started")]
    left_unfinished(db, "shell.run")


def test_a_knowledge_write_killed_after_its_file_left_its_started_record(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    ok(db, "jobs", "submit", "first")
    knowledge_written(db, tmp_path)
    assert sqlite_audits(db)[-1:] == [("knowledge.write", "started")]
    left_unfinished(db, "knowledge.write")


def test_a_runs_knowledge_write_killed_after_its_file_left_its_started_record(tmp_path: Path) -> None:
    """A run's tool call: its outcome goes with `run.tool_called`, which never came;
    the `started` record names the run."""
    db = tmp_path / "g.db"
    model = scripted(tmp_path, "m", [
        {"tool_calls": [{"name": "knowledge.write", "arguments": {"path": "run.md", "text": "# From a run\n"}}]},
        {"text": "done"}])
    gormes_killed(db, killed_after("gormes.tools.knowledge", "write_knowledge"),
                  "run", "agent", "--prompt", "note it", "--model", model, env=knowledge_env(tmp_path))
    assert (tmp_path / "knowledge" / "run.md").read_text() == "# From a run\n"
    assert rows(db, "SELECT count(*) FROM events WHERE type = 'run.tool_called'") == [(0,)]
    assert sqlite_audits(db)[-1:] == [("knowledge.write", "started")]
    listed = left_unfinished(db, "knowledge.write")
    [(stream,)] = rows(db, "SELECT stream FROM events WHERE type = 'run.started'")
    assert listed["run_id"] == stream.removeprefix("run-")


def test_a_mirror_killed_after_its_files_left_its_started_record(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    ok(db, "memory", "add-entity", "Ada")
    out = tmp_path / "mirror"
    gormes_killed(db, killed_after("gormes.tools.memory_admin", "mirror_store"), "memory", "mirror", "--out", str(out))
    assert (out / "USER.md").exists()
    assert sqlite_audits(db)[-1:] == [("memory.mirror", "started")]
    left_unfinished(db, "memory.mirror")


def test_a_rebuild_killed_after_its_tables_left_its_started_record(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    ok(db, "jobs", "submit", "first")
    gormes_killed(db, killed_after("gormes.tools.projections_admin", "rebuild_store"),
                  "projections", "rebuild", "streams")
    assert rows(db, "SELECT count(*) FROM streams WHERE stream GLOB 'job-*'") == [(1,)]  # rebuilt
    assert sqlite_audits(db)[-1:] == [("projections.rebuild", "started")]
    left_unfinished(db, "projections.rebuild")


def test_a_call_that_finished_is_not_unfinished(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    page = json.dumps({"path": "a.md", "text": "# A\n"})
    env = {**cli_env(), **knowledge_env(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "gormes", "--db", str(db), "ops", "call", "knowledge.write", page],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sqlite_audits(db) == [("knowledge.write", "started"), ("knowledge.write", "ok")]
    assert ok(db, "audit", "unfinished") == "no call without its outcome\n"
    assert ok(db, "audit", "unfinished", "--json") == ""

