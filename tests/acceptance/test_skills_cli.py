"""`gormes skills ...` and `gormes eval skills` through the real CLI, in
subprocesses, against real database files and skill directories."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import REPO, assert_one_line_error, run_gormes

from gormes.events.runs import RunCompleted, RunStarted, run_stream
from gormes.events.sqlite_log import SQLiteLog

FIXTURES = REPO / "tests" / "skills" / "fixtures"


@pytest.fixture
def fresh_db(tmp_path: Path) -> Path:
    return tmp_path / "gormes.db"


def events_of(db: Path, kind: str) -> list[dict]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT stream, data FROM events WHERE type = ? ORDER BY position", (kind,)).fetchall()
    return [{"stream": stream, **json.loads(data)} for stream, data in rows]


def test_check_passes_on_the_shipped_skills(fresh_db):
    done = run_gormes(fresh_db, "skills", "check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ok: 4 skills, 0 errors"
    report = json.loads(run_gormes(fresh_db, "skills", "check", "--json").stdout)
    assert report == {"ok": True, "skills": [
        "doctor-triage", "job-orchestration", "knowledge-routing", "replay-forensics"], "issues": []}
    assert not fresh_db.exists()  # checking reads no database


def test_check_exits_1_naming_the_file_and_field(fresh_db):
    done = run_gormes(fresh_db, "skills", "check", "--skills-dir", str(FIXTURES / "proven-short"))
    assert done.returncode == 1
    assert "error: tests/skills/fixtures/proven-short/eager/SKILL.md: field 'status': proven needs at least 3" in done.stdout
    assert done.stdout.splitlines()[-1] == "FAILED: 1 skill, 1 error"
    report = json.loads(run_gormes(fresh_db, "skills", "check", "--json", "--skills-dir", str(FIXTURES / "conflict")).stdout)
    assert [(i["rule"], i["field"]) for i in report["issues"]] == [("conflict", "triggers")]


def test_broken_yaml_is_one_clear_line_naming_the_file(fresh_db):
    broken = str(FIXTURES / "broken-yaml")
    line = assert_one_line_error(run_gormes(fresh_db, "skills", "list", "--skills-dir", broken))
    assert "tests/skills/fixtures/broken-yaml/oops/SKILL.md: broken YAML (front matter line 3)" in line
    checked = run_gormes(fresh_db, "skills", "check", "--skills-dir", broken)
    assert checked.returncode == 1 and "oops/SKILL.md: broken YAML" in checked.stdout
    assert "Traceback" not in checked.stderr


@pytest.mark.parametrize("command", [
    ("skills", "check"), ("skills", "list"), ("skills", "route", "replay"), ("eval", "skills"),
])
def test_a_missing_skills_directory_is_one_clear_line(fresh_db, tmp_path, command):
    missing = str(tmp_path / "no-skills")
    done = run_gormes(fresh_db, *command, "--skills-dir", missing)
    line = assert_one_line_error(done)
    assert line == f"gormes: error: {missing}: skills directory not found"
    assert done.returncode == 2


def test_route_says_what_it_chose_and_why(fresh_db):
    plain = run_gormes(fresh_db, "skills", "route", "replay the cancelled job")
    assert plain.returncode == 0
    assert plain.stdout.startswith("no skill answers this phrase (candidates not included")
    done = run_gormes(fresh_db, "skills", "route", "replay the cancelled job", "--candidates", "--json")
    result = json.loads(done.stdout)
    assert [(m["skill"], m["score"], m["why"]) for m in result["chosen"]] == [
        ("replay-forensics", 1.0, "trigger 'replay' matched (1 word)")]
    assert [r["skill"] for r in result["ruled_out"]] == ["job-orchestration"]
    text = run_gormes(fresh_db, "skills", "route", "replay the cancelled job", "--candidates").stdout
    assert "ruled out: job-orchestration: exclusion" in text


def test_eval_skills_is_100_percent_on_the_shipped_set(fresh_db):
    done = run_gormes(fresh_db, "eval", "skills")
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("routing accuracy: 100.0%")
    report = json.loads(run_gormes(fresh_db, "eval", "skills", "--json").stdout)
    assert report["accuracy"] == 1.0 and report["failures"] == [] and report["total"] >= 30


def test_eval_skills_exits_1_with_the_confusion_pairs(fresh_db, tmp_path):
    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "wrong.yaml").write_text("- {phrase: replay run 7, expect: doctor-triage}\n- {phrase: is gormes healthy, expect: doctor-triage}\n")
    done = run_gormes(fresh_db, "eval", "skills", "--evals-dir", str(evals), "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["accuracy"] == 0.5
    assert report["confusion"] == [{"expected": "doctor-triage", "got": "replay-forensics", "count": 1}]


def test_promote_refuses_short_evidence_then_promotes_and_records_it(fresh_db, tmp_path):
    root = tmp_path / "skills"
    shutil.copytree(FIXTURES / "good", root)
    refused = run_gormes(fresh_db, "skills", "promote", "alpha", "--skills-dir", str(root))
    assert "alpha stays candidate: proven needs at least 3 evidence entries, it has 0" in assert_one_line_error(refused)
    skill = root / "alpha" / "SKILL.md"
    skill.write_text(skill.read_text().replace("evidence: []", (
        "evidence:\n  - {date: 2026-01-05, type: run, ref: run-1}\n"
        "  - {date: 2026-01-06, type: run, ref: run-2}\n  - {date: 2026-01-07, type: review, ref: bob}"
    )))
    done = run_gormes(fresh_db, "skills", "promote", "alpha", "--skills-dir", str(root), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["to_status"] == "proven"
    assert "status: proven\n" in skill.read_text() and skill.read_text().endswith("# alpha\n\nBody of alpha.\n")
    (event,) = events_of(fresh_db, "skill.promoted")
    assert (event["stream"], event["from"], event["to"], len(event["evidence"])) == ("skill-alpha", "candidate", "proven", 3)
    listed = json.loads(run_gormes(fresh_db, "skills", "list", "--json", "--skills-dir", str(root)).stdout)
    assert {s["name"]: s["status"] for s in listed}["alpha"] == "proven"


def test_a_routed_selection_is_tied_to_its_run_and_its_outcome(fresh_db):
    log = SQLiteLog(fresh_db)
    try:
        log.append_now(run_stream("r1"), [RunStarted(run_id="r1", handler="agent", handler_version="v")])
    finally:
        log.close()
    done = run_gormes(fresh_db, "skills", "route", "why did my run fail", "--candidates", "--run", "r1")
    assert done.returncode == 0, done.stderr
    assert "recorded skill.selected at position 2 for run r1" in done.stdout
    log = SQLiteLog(fresh_db)
    try:
        log.append_now(run_stream("r1"), [RunCompleted()])
    finally:
        log.close()
    assert run_gormes(fresh_db, "skills", "feedback", "r1", "replay-forensics", "good").returncode == 0
    rows = json.loads(run_gormes(fresh_db, "skills", "usage", "--json").stdout)
    assert [(r["skill"], r["run_id"], r["outcome"], r["feedback"]) for r in rows] == [
        ("replay-forensics", "r1", "completed", "good")]
    unknown = run_gormes(fresh_db, "skills", "route", "replay", "--candidates", "--run", "ghost")
    assert assert_one_line_error(unknown) == "gormes: error: no run 'ghost' in this database"
