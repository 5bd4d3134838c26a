"""`gormes skills feedback` names a skill that exists, and the feedback it records
is evidence that `skills promote` counts (issue 19, item 5), through the real CLI."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from cli_helpers import REPO, assert_one_line_error, run_gormes

from gormes.events.runs import RunCompleted, RunStarted, run_stream
from gormes.events.sqlite_log import SQLiteLog

FIXTURES = REPO / "tests" / "skills" / "fixtures"


def recorded_runs(db: Path, *run_ids: str) -> None:
    log = SQLiteLog(db)
    try:
        for run_id in run_ids:
            log.append_now(run_stream(run_id), [RunStarted(run_id=run_id, handler="agent", handler_version="v"),
                                                RunCompleted()])
    finally:
        log.close()


def feedback_events(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT data FROM events WHERE type = 'skill.feedback'")]


def test_feedback_on_a_skill_that_does_not_exist_is_refused(tmp_path: Path):
    db = tmp_path / "g.db"
    root = tmp_path / "skills"
    shutil.copytree(FIXTURES / "good", root)
    recorded_runs(db, "r1")
    done = run_gormes(db, "skills", "feedback", "r1", "no-such-skill", "good", "--skills-dir", str(root))
    assert assert_one_line_error(done) == f"gormes: error: no skill named 'no-such-skill' in {root}"
    assert done.returncode == 2
    assert feedback_events(db) == []
    kept = run_gormes(db, "skills", "feedback", "r1", "alpha", "good", "--skills-dir", str(root))
    assert kept.returncode == 0, kept.stderr
    assert len(feedback_events(db)) == 1


def test_promotion_counts_recorded_good_feedback(tmp_path: Path):
    db = tmp_path / "g.db"
    root = tmp_path / "skills"
    shutil.copytree(FIXTURES / "good", root)
    recorded_runs(db, "r1", "r2", "r3", "r4")

    def feedback(run_id: str, verdict: str, *note: str) -> None:
        done = run_gormes(db, "skills", "feedback", run_id, "alpha", verdict, *note, "--skills-dir", str(root))
        assert done.returncode == 0, done.stderr

    for run_id in ("r1", "r2", "r3"):
        feedback(run_id, "good")
    feedback("r3", "bad", "--note", "it misread the log")  # the latest verdict on a run counts
    refused = run_gormes(db, "skills", "promote", "alpha", "--skills-dir", str(root))
    assert "alpha stays candidate: proven needs at least 3 evidence entries, it has 2" in assert_one_line_error(refused)

    feedback("r4", "good", "--note", "found the divergence")
    done = run_gormes(db, "skills", "promote", "alpha", "--skills-dir", str(root), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["to_status"] == "proven"
    # the file alone justifies its new status: the feedback is in its front matter
    text = (root / "alpha" / "SKILL.md").read_text()
    assert "status: proven\n" in text and "ref: r4" in text and "feedback good: found the divergence" in text
    assert "ref: r3" not in text
    checked = run_gormes(db, "skills", "check", "--skills-dir", str(root))
    assert checked.returncode == 0, checked.stdout
    with sqlite3.connect(db) as conn:
        (data,) = conn.execute("SELECT data FROM events WHERE type = 'skill.promoted'").fetchone()
    assert [e["ref"] for e in json.loads(data)["evidence"]] == ["r1", "r2", "r4"]
