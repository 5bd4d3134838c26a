"""`gormes projections status|rebuild [--check]`, run as a real process on a real file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest
import trio

from gormes.events.notes import NoteAdded
from gormes.events.sqlite import SQLiteEventStore
from gormes.events.sqlite_log import SQLiteLog
from gormes.projections.runner import ProjectionRunner
from gormes.projections.streams import StreamsProjection


def gormes(db, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gormes", "--db", str(db), "projections", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def append_notes(db, count: int, start: int = 0) -> None:
    log = SQLiteLog(db)
    try:
        for i in range(start, start + count):
            log.append_now(f"job-{i % 5}", [NoteAdded(text=f"note {i}")])
    finally:
        log.close()


def execute(db, sql: str) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        with conn:
            return conn.execute(sql).fetchall()
    finally:
        conn.close()


def status(db) -> dict:
    done = gormes(db, "status", "--json")
    assert done.returncode == 0, done.stderr
    [streams] = [s for s in json.loads(done.stdout) if s["name"] == "streams"]
    return streams


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "gormes.db"
    append_notes(path, 40)
    return path


def test_status_then_rebuild_then_status(db):
    before = status(db)
    assert (before["state"], before["position"], before["head"], before["lag"]) == (
        "not built", 0, 40, 40,
    )
    done = gormes(db, "rebuild", "--json")
    assert done.returncode == 0, done.stderr
    rebuilt = {r["name"]: r for r in json.loads(done.stdout)}
    assert rebuilt["streams"] == {"name": "streams", "version": 1, "position": 41}  # 41: its `started` record
    assert done.stderr == ""  # not a terminal: no progress display
    after = status(db)
    # the rebuild's outcome record (decisions 0019, 0062) is the one event after it
    assert (after["state"], after["position"], after["lag"], after["failures"]) == ("behind", 41, 1, 0)
    assert after["built_version"] == after["version"] == StreamsProjection.version
    streams = execute(db, "SELECT stream, version FROM streams ORDER BY stream")
    assert [row for row in streams if not row[0].startswith("audit-")] == [(f"job-{i}", 8) for i in range(5)]
    assert [version for name, version in streams if name.startswith("audit-")] == [1]  # its `started` record


def test_check_is_clean_then_catches_a_tampered_row_and_rebuild_repairs_it(db):
    assert gormes(db, "rebuild").returncode == 0
    append_notes(db, 10, start=40)  # the live tables are now behind: compared at 41

    clean = gormes(db, "rebuild", "streams", "--check", "--json")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    [result] = json.loads(clean.stdout)
    assert (result["state"], result["position"], result["differences"]) == ("identical", 41, [])

    execute(db, "UPDATE streams SET version = 99 WHERE stream = 'job-3'")
    dirty = gormes(db, "rebuild", "streams", "--check", "--json")
    assert dirty.returncode == 1, dirty.stdout + dirty.stderr
    [result] = json.loads(dirty.stdout)
    assert result["state"] == "different"
    kinds = {(d["kind"], d["row"]["stream"], d["row"]["version"]) for d in result["differences"]}
    assert kinds == {("missing", "job-3", 8), ("unexpected", "job-3", 99)}
    # The check wrote nothing to the live database.
    assert execute(db, "SELECT version FROM streams WHERE stream = 'job-3'") == [(99,)]

    human = gormes(db, "rebuild", "--check")
    assert human.returncode == 1
    assert "streams: DIFFERS" in human.stdout and "'version': 99" in human.stdout

    repaired = gormes(db, "rebuild", "streams")
    assert repaired.returncode == 0, repaired.stderr
    assert "up to position 53" in repaired.stdout  # 40 notes, the first rebuild's 2 audit records, 10 notes, its `started`
    assert gormes(db, "rebuild", "--check").returncode == 0
    assert execute(db, "SELECT version FROM streams WHERE stream = 'job-3'") == [(10,)]


def test_check_reports_a_deleted_row(db):
    assert gormes(db, "rebuild").returncode == 0
    execute(db, "DELETE FROM streams WHERE stream = 'job-0'")
    done = gormes(db, "rebuild", "streams", "--check", "--json")
    assert done.returncode == 1
    [result] = json.loads(done.stdout)
    assert [(d["kind"], d["row"]["stream"]) for d in result["differences"]] == [("missing", "job-0")]


def test_check_of_a_projection_never_built_passes(db):
    done = gormes(db, "rebuild", "--check")
    assert done.returncode == 0, done.stderr
    assert "not built" in done.stdout
    assert status(db)["state"] == "not built"  # and it built nothing in the live file


def test_status_reports_a_failed_batch(db):
    class Broken(StreamsProjection):
        def apply(self, conn, records):
            raise RuntimeError("disk gremlin")

    async def fail_once() -> None:
        async with SQLiteEventStore.open(db) as store:
            with pytest.raises(Exception, match="disk gremlin"):
                await ProjectionRunner(store, Broken()).catch_up()

    trio.run(fail_once)
    failing = status(db)
    assert (failing["state"], failing["failures"], failing["position"]) == ("failing", 1, 0)
    assert "RuntimeError: disk gremlin" in failing["last_error"]
    human = gormes(db, "status")
    assert "failing" in human.stdout and "disk gremlin" in human.stdout

    assert gormes(db, "rebuild").returncode == 0
    repaired = status(db)
    assert (repaired["failures"], repaired["position"], repaired["lag"]) == (0, 41, 1)  # 41: its `started`; 1: its outcome


def test_unknown_projection_is_one_line_and_exit_2(db):
    done = gormes(db, "rebuild", "nope")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("gormes: error: unknown projection 'nope' (known: ")
    assert "streams" in line


def test_status_of_a_missing_database_is_one_line(tmp_path):
    done = gormes(tmp_path / "absent.db", "status")
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "absent.db").exists()
