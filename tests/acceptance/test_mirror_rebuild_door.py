"""`gormes memory mirror` and `gormes projections rebuild` go through the one
audited door (decision 0019): each leaves exactly one call's audit records with
trust `operator` (two: written ahead, `started` and then its outcome, decision
0062), a refusal made after the store was opened is one `gormes: error:`
line and audited, and no other trust class may call either operation.

The CLI runs in subprocesses against real SQLite files; the trust check is made
straight at the executor, past any MCP filtering."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, run_gormes, write_notes

from gormes.events.open import open_store
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, OperationDenied
from gormes.tools.builtin import default_registry


def _events(db: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT stream, type, data FROM events ORDER BY position").fetchall()
    finally:
        conn.close()


def _audits(db: Path) -> list[dict]:
    return [json.loads(data) for _, kind, data in _events(db) if kind == "audit.operation"]


def _others(db: Path) -> list[tuple[str, str]]:
    return [(stream, kind) for stream, kind, _ in _events(db) if kind != "audit.operation"]


def _started_then(records: list[dict]) -> dict:
    """The outcome record of a write-ahead call, checked against its `started` record."""
    started, record = records
    assert started["outcome"] == "started" and started["allowed"] is True, started
    assert (started["operation"], started["input_sha256"]) == (record["operation"], record["input_sha256"])
    assert record["started_position"] is not None and "started_position" not in started  # stored at its default: left out
    return record


def _by_operator(record: dict, operation: str, outcome: str) -> None:
    assert (record["operation"], record["trust"], record["caller"], record["outcome"]) == (
        operation, "operator", "cli", outcome), record


@pytest.fixture
def memory_db(tmp_path: Path) -> Path:
    db = tmp_path / "g.db"
    assert run_gormes(db, "memory", "add-entity", "Ada").returncode == 0
    assert run_gormes(db, "memory", "add-fact", "likes tea", "--subject", "Ada").returncode == 0
    return db


# -- memory mirror ------------------------------------------------------------------


def test_mirror_is_one_audited_operator_call(memory_db: Path, tmp_path: Path):
    before, others = len(_audits(memory_db)), _others(memory_db)
    out = tmp_path / "mirror"
    done = run_gormes(memory_db, "memory", "mirror", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"2 pages in {out}: 2 written, 0 removed"
    assert "likes tea" in (out / "USER.md").read_text()
    record = _started_then(_audits(memory_db)[before:])
    _by_operator(record, "memory.mirror", "ok")
    assert record["mutating"] is True and record["audit_kind"] == "memory.write"
    assert _others(memory_db) == others  # files written, no event but the audit record

    again = run_gormes(memory_db, "memory", "mirror", "--out", str(out), "--json")
    assert json.loads(again.stdout) == {"out": str(out), "pages": 2, "written": 0, "removed": 0}
    assert len(_audits(memory_db)) == before + 4


def test_a_mirror_refused_below_its_directory_is_one_line_and_audited(memory_db: Path, tmp_path: Path):
    out = tmp_path / "mirror"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "entities").symlink_to(elsewhere)
    before = len(_audits(memory_db))
    line = assert_one_line_error(run_gormes(memory_db, "memory", "mirror", "--out", str(out)))
    assert "symlink" in line
    assert list(elsewhere.iterdir()) == []  # nothing written outside the directory named
    record = _started_then(_audits(memory_db)[before:])  # refused by the handler, once it started
    _by_operator(record, "memory.mirror", "invalid")
    assert record["error"]


def test_an_out_that_is_a_file_is_refused_before_the_door(memory_db: Path, tmp_path: Path):
    out = tmp_path / "a-file"
    out.write_text("mine\n")
    before = _events(memory_db)
    assert_one_line_error(run_gormes(memory_db, "memory", "mirror", "--out", str(out)))
    assert out.read_text() == "mine\n"
    assert _events(memory_db) == before  # no call was made: nothing to audit


# -- projections rebuild --------------------------------------------------------------


@pytest.fixture
def notes_db(tmp_path: Path) -> Path:
    db = tmp_path / "g.db"
    write_notes(db, [("notes-1", "first"), ("notes-2", "second")])
    return db


def test_rebuild_is_one_audited_operator_call(notes_db: Path):
    done = run_gormes(notes_db, "projections", "rebuild", "streams")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "streams: rebuilt (version 1) up to position 3\n"  # 3: its `started` record
    record = _started_then(_audits(notes_db))
    _by_operator(record, "projections.rebuild", "ok")
    assert record["mutating"] is True and record["audit_kind"] == "projections.write"
    assert _others(notes_db) == [("notes-1", "note.added"), ("notes-2", "note.added")]

    everything = run_gormes(notes_db, "projections", "rebuild", "--json")
    assert everything.returncode == 0, everything.stderr
    rebuilt = {r["name"]: r["position"] for r in json.loads(everything.stdout)}
    assert rebuilt["streams"] == 5  # 3, 4: the first rebuild's records; 5: this one's `started`
    assert len(_audits(notes_db)) == 4


def test_a_rebuild_refused_is_one_line_and_audited(notes_db: Path):
    done = run_gormes(notes_db, "projections", "rebuild", "streams", "nope")
    assert done.returncode == 2
    line = assert_one_line_error(done)
    assert line.startswith("gormes: error: unknown projection 'nope' (known: ")
    record = _started_then(_audits(notes_db))  # refused by the handler, once it started
    _by_operator(record, "projections.rebuild", "invalid")


def test_rebuild_check_is_a_read_and_not_audited(notes_db: Path):
    assert run_gormes(notes_db, "projections", "rebuild").returncode == 0
    before = _events(notes_db)
    checked = run_gormes(notes_db, "projections", "rebuild", "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "streams: identical to a rebuild at position 3" in checked.stdout
    assert _events(notes_db) == before  # the live database is not written
    refused = run_gormes(notes_db, "projections", "rebuild", "nope", "--check")
    assert refused.returncode == 2 and "unknown projection 'nope'" in assert_one_line_error(refused)
    assert _events(notes_db) == before


# -- no other trust class -----------------------------------------------------------


@pytest.mark.parametrize("trust", ["gateway", "child-agent", "system"])
@pytest.mark.parametrize("operation, value", [("memory.mirror", {"out": "mirror"}), ("projections.rebuild", {})])
async def test_no_other_trust_class_may_call_them(tmp_path: Path, trust: str, operation: str, value: dict):
    db = tmp_path / "door.db"
    async with open_store(db) as store:
        executor = Executor(default_registry(), store, workspace=tmp_path)
        with pytest.raises(OperationDenied):
            await executor.call(operation, value, Caller(trust=trust, id="intruder"))
    assert not (tmp_path / "mirror").exists()
    assert [(r["operation"], r["trust"], r["outcome"], r["allowed"]) for r in _audits(db)] == [
        (operation, trust, "denied", False)]
    assert _others(db) == []
    conn = sqlite3.connect(db)
    try:  # nothing was rebuilt: the streams projection has no table yet
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'streams'").fetchone() == (0,)
    finally:
        conn.close()
    spec = default_registry().get(operation)
    assert spec is not None and spec.trust == frozenset({"operator"}) and not spec.prompt_visible
