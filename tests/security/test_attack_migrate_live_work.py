"""`gormes migrate` continuing into a PostgreSQL log that already holds events: a
source crafted as that log plus a waiting job (an export of it was enough to build
one) passes the prefix check, and the copy put the job where the deployment's
workers run it, with the trust its `job.submitted` names. A continuation now
refuses live work in what it adds, as an import does (decision 0068, the rule of
0059), unless --live-work; a migration into an empty target moves a whole log and
keeps its live work, as its users expect."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cli_helpers import assert_one_line_error, run_gormes, running_worker, write_notes
from pg_helpers import pg_rows, schema_url  # noqa: F401 - schema_url is the `url` fixture

from gormes.events.approvals import APPROVALS_STREAM, ApprovalDecided, ApprovalRequested
from gormes.events.sqlite_log import SQLiteLog

NOTES = [(f"notes-{i % 3}", f"note {i}") for i in range(20)]


def migrate(source: Path, url: str, *extra: str):
    return run_gormes(source, "migrate", "--from", f"sqlite:{source}", "--to", url, *extra)


def submitted(db: Path) -> str:
    done = run_gormes(db, "jobs", "submit", "echo", "--data", '{"said": "hello"}')
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def jobs_on(url: str) -> list[dict]:
    listed = run_gormes(url, "jobs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


def own_log_migrated(tmp_path: Path, url: str) -> Path:
    own = tmp_path / "own.db"
    write_notes(own, NOTES)
    done = migrate(own, url)
    assert done.returncode == 0, done.stderr
    return own


def test_a_continuation_that_brings_a_waiting_job_is_refused(tmp_path: Path, url: str) -> None:
    own = own_log_migrated(tmp_path, url)
    crafted = tmp_path / "crafted.db"
    shutil.copy(own, crafted)  # the deployment's log as it stands, then a job after it
    job_id = submitted(crafted)
    before = pg_rows(url, "SELECT count(*) FROM events")

    refused = migrate(crafted, url)
    assert refused.returncode == 2
    error = assert_one_line_error(refused)
    assert error.startswith("gormes: error: ")
    assert f"job {job_id} (waiting, submitted as operator)" in error and "--live-work" in error
    assert pg_rows(url, "SELECT count(*) FROM events") == before
    assert jobs_on(url) == []


def test_with_live_work_the_continuation_copies_the_job_and_a_worker_runs_it(tmp_path: Path, url: str) -> None:
    """The reason for the refusal, shown: once copied, the target's worker runs it."""
    own = own_log_migrated(tmp_path, url)
    job_id = submitted(own)  # the operator's own log went on after the first copy
    done = migrate(own, url, "--live-work", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verified"] is True
    with running_worker(url):  # type: ignore[arg-type]
        waited = run_gormes(url, "jobs", "wait", job_id, "--timeout", "60")
    assert waited.returncode == 0, waited.stderr
    assert [job["status"] for job in jobs_on(url)] == ["completed"]


def test_a_migration_into_an_empty_target_keeps_its_live_work(tmp_path: Path, url: str) -> None:
    """Moving one's own log: the target is the source, row for row, and nothing of
    its own is there to be reached; its waiting jobs and active schedules come along."""
    own = tmp_path / "own.db"
    job_id = submitted(own)
    assert run_gormes(own, "cron", "add", "nightly", "--schedule", "0 3 * * *", "--job", "echo").returncode == 0
    done = migrate(own, url)
    assert done.returncode == 0, done.stderr
    assert [(job["id"], job["status"]) for job in jobs_on(url)] == [(job_id, "waiting")]


def test_a_continuation_that_brings_history_needs_no_flag(tmp_path: Path, url: str) -> None:
    """Notes, and a job that ended on the source, are history."""
    own = own_log_migrated(tmp_path, url)
    write_notes(own, [("notes-9", "later")])
    job_id = submitted(own)
    assert run_gormes(own, "jobs", "cancel", job_id).returncode == 0
    done = migrate(own, url)
    assert done.returncode == 0, done.stderr
    assert [job["status"] for job in jobs_on(url)] == ["cancelled"]


def test_a_continuation_deciding_a_copy_of_a_request_pending_there_is_refused(tmp_path: Path, url: str) -> None:
    """A source that adds a copy of a request pending in the target, and its
    approval: the held call there would run."""
    request = ApprovalRequested(approval_id="A1", operation="shell.run", arguments="{}", args_hash="h",
                                run_id="here", caller="run-here", trust="gateway", why="spec", at=1)
    own = tmp_path / "own.db"
    log = SQLiteLog(own)
    try:
        log.append_now(APPROVALS_STREAM, [request])
    finally:
        log.close()
    assert migrate(own, url).returncode == 0
    crafted = tmp_path / "crafted.db"
    shutil.copy(own, crafted)
    log = SQLiteLog(crafted)
    try:
        log.append_now(APPROVALS_STREAM, [request, ApprovalDecided(approval_id="A1", decision="approved",
                                                                   by="operator:cli", at=2)])
    finally:
        log.close()
    error = assert_one_line_error(migrate(crafted, url))
    assert "approval A1 approved, requested here" in error
    listed = json.loads(run_gormes(url, "approvals", "list", "--json").stdout)["approvals"]
    assert [(a["id"], a["status"]) for a in listed] == [("A1", "pending")]
