"""The ledger and the projections on a database this process cannot write (read-only
media, a copy handed over for an audit; an operator's finding: `jobs list`, `jobs
stats`, `runs list` and `cron list` failed there while `events` worked). What is set
up and current is read as it is; what would have to be set up or caught up first
is one line that says so; the file is never touched."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import (
    SAMPLE, assert_one_line_error, digest, mounted_tmpfs, remount_read_only, run_gormes, write_notes,
)


def ok(db: Path, *args: str) -> str:
    done = run_gormes(db, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def frozen(db: Path, mount_point: Path, tmp_path: Path) -> Path:
    """`db` made unwritable for this process: the tmpfs remounted read-only (as
    root, file modes do not stop writes), or else the file and its folder 0555."""
    if os.geteuid() == 0:
        remount_read_only(mount_point)
    else:
        db.chmod(0o444)
        db.parent.chmod(0o555)
    return db


@pytest.fixture
def where(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        yield tmp_path / "db"
        return
    yield from mounted_tmpfs(tmp_path, "16m")


def test_the_job_and_run_reads_work_on_a_read_only_database(where: Path, tmp_path: Path):
    db = where / "gormes.db"
    job = ok(db, "jobs", "submit", "echo", "--data", '{"n": 1}').strip()
    ok(db, "cron", "add", "nightly", "--schedule", "0 3 * * *", "--job", "echo")
    listed, stats = ok(db, "jobs", "list", "--json"), ok(db, "jobs", "stats", "--json")
    runs, cron = ok(db, "runs", "list", "--json"), ok(db, "cron", "list", "--json")  # caught up here
    frozen(db, where, tmp_path)
    before = digest(db)
    assert ok(db, "jobs", "list", "--json") == listed
    assert ok(db, "jobs", "stats", "--json") == stats
    assert json.loads(ok(db, "jobs", "get", job, "--json"))["id"] == job
    assert ok(db, "runs", "list", "--json") == runs
    assert ok(db, "cron", "list", "--json") == cron
    top = json.loads(ok(db, "top", "--once", "--json"))
    assert top["by_status"]["waiting"] == 1
    assert digest(db) == before


def test_a_ledger_never_set_up_is_one_line(where: Path, tmp_path: Path):
    db = where / "gormes.db"
    write_notes(db, SAMPLE)  # a log no job command has opened
    frozen(db, where, tmp_path)
    before = digest(db)
    line = assert_one_line_error(run_gormes(db, "jobs", "list"))
    assert line == f"gormes: error: {db} is read-only and its job ledger is not set up for this gormes:" \
                   " open it once where it can be written"
    assert digest(db) == before


def test_a_projection_behind_the_log_is_one_line(where: Path, tmp_path: Path):
    db = where / "gormes.db"
    ok(db, "jobs", "submit", "echo")
    ok(db, "runs", "list")  # the runs projection built, at the head
    ok(db, "ops", "call", "run.submit", '{"prompt": "p"}')  # a job and its audit, not a run yet
    ok(db, "append", "run-x", "run.started", "--data", '{"run_id": "x", "handler": "h", "handler_version": "1"}')
    frozen(db, where, tmp_path)
    before = digest(db)
    done = run_gormes(db, "runs", "list")
    assert done.returncode == 1
    line = assert_one_line_error(done)
    assert "is read-only and its 'runs' projection is behind the log" in line and "catches the projection up" in line
    assert ok(db, "jobs", "list", "--json")  # the ledger is inline: current
    assert digest(db) == before


def test_an_audited_read_says_it_cannot_be_audited(where: Path, tmp_path: Path):
    db = where / "gormes.db"
    ok(db, "jobs", "submit", "echo")
    frozen(db, where, tmp_path)
    line = assert_one_line_error(run_gormes(db, "budget", "list"))
    assert "read-only" in line
