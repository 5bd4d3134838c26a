"""Bad input: one clear line on stderr, no traceback, a non-zero exit, and the log
(or whatever file --db named) left exactly as it was.

Malformed event JSON and unknown types are covered command by command in
test_cmd_append.py and test_cmd_jsonl.py; here: the same through every writing
command, wrong --db files for every command, a read-only database, a full disk.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import (
    SAMPLE,
    assert_one_line_error,
    digest,
    json_lines,
    remount_read_only,
    run_gormes,
    write_notes,
)

from gormes.events.sqlite_log import SQLiteLog
from gormes.events.sqlite_schema import APPLICATION_ID, SCHEMA_VERSION

GOOD_LINE = json.dumps({"stream": "s", "type": "note.added", "data": {"text": "x"}})

# name -> (arguments, stdin)
READ_COMMANDS: dict[str, tuple[list[str], str | None]] = {
    "events": (["events"], None),
    "events --json": (["events", "--json"], None),
    "tail": (["tail", "--json"], None),
    "tail --follow": (["tail", "--follow", "--json"], None),
    "export": (["export"], None),
    "query": (["query", "SELECT count(*) FROM events"], None),
}
WRITE_COMMANDS: dict[str, tuple[list[str], str | None]] = {
    "append": (["append", "s", "note.added", "--data", '{"text": "x"}'], None),
    "import": (["import", "-"], GOOD_LINE),
}
ALL_COMMANDS = {**READ_COMMANDS, **WRITE_COMMANDS}


# -- wrong --db ---------------------------------------------------------------


def a_directory(tmp: Path) -> Path:
    path = tmp / "a-directory"
    path.mkdir()
    (path / "inside.txt").write_text("keep me")
    return path


def a_text_file(tmp: Path) -> Path:
    path = tmp / "notes.txt"
    path.write_text("these are my notes, not a database\n" * 200)
    return path


def a_foreign_sqlite_db(tmp: Path) -> Path:
    path = tmp / "other.db"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE events(id INTEGER PRIMARY KEY, what TEXT)")
        conn.execute("INSERT INTO events(what) VALUES ('theirs')")
    conn.close()
    return path


def a_newer_gormes_db(tmp: Path) -> Path:
    path = tmp / "newer.db"
    write_notes(path, SAMPLE)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    return path


WRONG_DBS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "directory": (a_directory, "is a directory"),
    "text file": (a_text_file, "not a gormes database"),
    "foreign sqlite": (a_foreign_sqlite_db, "not a gormes one"),
    "newer schema": (a_newer_gormes_db, f"schema version {SCHEMA_VERSION + 1}"),
}


@pytest.mark.parametrize("command", list(ALL_COMMANDS))
@pytest.mark.parametrize("kind", list(WRONG_DBS))
def test_wrong_db_is_one_line_and_untouched(tmp_path: Path, kind: str, command: str) -> None:
    make, expected = WRONG_DBS[kind]
    path = make(tmp_path)
    before = digest(path)
    siblings = sorted(p.name for p in tmp_path.iterdir())
    args, stdin = ALL_COMMANDS[command]
    line = assert_one_line_error(run_gormes(path, *args, input=stdin))
    assert expected in line
    assert digest(path) == before
    # Reading a WAL database makes SQLite create its (empty) -wal and -shm files.
    wal = tmp_path / f"{path.name}-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    added = sorted({p.name for p in tmp_path.iterdir()} - set(siblings))
    assert added in ([], [f"{path.name}-shm", f"{path.name}-wal"])


def test_the_newer_schema_check_reads_our_application_id(tmp_path: Path) -> None:
    path = a_newer_gormes_db(tmp_path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()


# `tail --follow` waits for a missing database instead (tests/acceptance/test_tail_waits.py).
@pytest.mark.parametrize("command", [c for c in READ_COMMANDS if c != "tail --follow"])
def test_read_commands_never_create_a_missing_db(tmp_path: Path, command: str) -> None:
    path = tmp_path / "missing-dir" / "gormes.db"
    args, stdin = READ_COMMANDS[command]
    line = assert_one_line_error(run_gormes(path, *args, input=stdin))
    assert "no gormes database" in line
    assert not path.parent.exists()


# -- bad event data through every writing command ----------------------------


@pytest.mark.parametrize(
    ("data", "type_", "expected"),
    [
        ("{oops", "note.added", "malformed JSON"),
        ('{"text": "x"}', "note.removed", "unknown event type 'note.removed'"),
        ('{"text": "x", "author": 7}', "note.added", "Expected `str`, got `int`"),
    ],
)
@pytest.mark.parametrize("command", ["append", "import"])
def test_bad_event_leaves_the_log_unchanged(
    db: Path, command: str, data: str, type_: str, expected: str
) -> None:
    before = logged(db)
    if command == "append":
        result = run_gormes(db, "append", "s", type_, "--data", data)
    else:
        line = f'{{"stream": "s", "type": "{type_}", "data": {data}}}'
        result = run_gormes(db, "import", "-", input=GOOD_LINE + "\n" + line + "\n")
    assert expected in assert_one_line_error(result)
    # nothing is written but, for a refusal the append operation makes, its audit record
    assert logged(db) == before


def logged(db: Path) -> list[tuple]:
    """Every event but the audit records."""
    log = SQLiteLog(db, readonly=True)
    try:
        return [(r.position, r.stream, r.version, r.type) for r in log.read_all()
                if not r.stream.startswith("audit-")]
    finally:
        log.close()


# -- a read-only database --------------------------------------------------------


@pytest.fixture
def read_only_db(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A database holding SAMPLE that this process cannot write.

    As root, file modes do not stop writes, so the database sits on a tmpfs that
    is then remounted read-only; otherwise the file is chmod 0444.
    """
    if os.geteuid() == 0:
        mount_point = request.getfixturevalue("tmpfs")
        path = mount_point / "gormes.db"
        write_notes(path, SAMPLE)
        remount_read_only(mount_point)
        return path
    path = tmp_path / "gormes.db"
    write_notes(path, SAMPLE)
    path.chmod(0o444)
    return path


def test_read_commands_work_on_a_read_only_db(read_only_db: Path) -> None:
    before = digest(read_only_db)
    events = run_gormes(read_only_db, "events", "--json")
    assert events.returncode == 0, events.stderr
    assert [(e["stream"], e["data"]["text"]) for e in json_lines(events.stdout)] == SAMPLE
    assert run_gormes(read_only_db, "tail", "--json").stdout == events.stdout
    assert run_gormes(read_only_db, "export").stdout == events.stdout
    table = run_gormes(read_only_db, "events")
    assert table.returncode == 0 and "fourth" in table.stdout
    query = run_gormes(read_only_db, "query", "--json", "SELECT count(*) AS n FROM events")
    assert json_lines(query.stdout) == [{"n": 4}]
    assert digest(read_only_db) == before


@pytest.mark.parametrize("command", list(WRITE_COMMANDS))
def test_writing_to_a_read_only_db_is_one_line(read_only_db: Path, command: str) -> None:
    before = digest(read_only_db)
    args, stdin = WRITE_COMMANDS[command]
    assert "read-only" in assert_one_line_error(run_gormes(read_only_db, *args, input=stdin))
    assert digest(read_only_db) == before


# -- a full disk -------------------------------------------------------------------


def test_a_full_disk_is_one_line_and_the_log_stays_intact(tmpfs: Path) -> None:
    """Append 60 kB events to a 512 kB tmpfs until the disk is full."""
    path = tmpfs / "gormes.db"
    acknowledged: dict[int, str] = {}
    failure = None
    for i in range(40):
        text = f"{i}:" + "x" * 60_000
        result = run_gormes(path, "append", f"s-{i % 2}", "note.added",
                            "--data", json.dumps({"text": text}), "--json")
        if result.returncode != 0:
            failure = result
            break
        [line] = json_lines(result.stdout)
        acknowledged[line["position"]] = text
    assert failure is not None, "the tmpfs never filled up"
    assert "disk full" in assert_one_line_error(failure)
    assert acknowledged, "the disk was full before the first append"

    # Further attempts fail the same way and do no harm.
    again = run_gormes(path, "import", "-", input=GOOD_LINE)
    assert "disk full" in assert_one_line_error(again)

    log = SQLiteLog(path, readonly=True)
    try:
        records = log.read_all()
        assert [r.position for r in records] == list(range(1, log.head() + 1))
        notes = [r for r in records if not r.stream.startswith("audit-")]  # each append is audited
        assert {r.position: r.event.text for r in notes} == acknowledged
        for stream in ("s-0", "s-1"):
            versions = [r.version for r in log.read_stream(stream)]
            assert versions == list(range(1, len(versions) + 1))
        assert log.conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    finally:
        log.close()
    listed = run_gormes(path, "events", "--stream", "s-*", "--json")
    assert [e["position"] for e in json_lines(listed.stdout)] == sorted(acknowledged)


# -- a PostgreSQL URL that cannot be reached --------------------------------------

# The commands that once refused a URL and now read PostgreSQL: an unreachable
# server is one line (the password hidden), and no SQLite file is made.
POSTGRES_READING_COMMANDS = {
    "query": ["query", "SELECT 1"],
    "export": ["export"],
    "export --type": ["export", "--type", "job.*"],
    "audit export": ["audit", "export"],
    "audit unfinished": ["audit", "unfinished"],
    "top": ["top", "--once"],
    "projections rebuild --check": ["projections", "rebuild", "--check"],
    "demo": ["demo"],
}


@pytest.mark.parametrize("command", list(POSTGRES_READING_COMMANDS))
def test_postgres_reading_commands_say_the_server_cannot_be_reached(tmp_path: Path, command: str) -> None:
    import subprocess

    from cli_helpers import cli_env, gormes_command

    url = "postgresql://nobody:secret@127.0.0.1:1/nowhere"
    done = subprocess.run(
        gormes_command(url, *POSTGRES_READING_COMMANDS[command]), capture_output=True, text=True,
        env=cli_env(), timeout=60, cwd=tmp_path,
    )
    line = assert_one_line_error(done)
    assert line.startswith("gormes: error: cannot connect to PostgreSQL at postgresql://nobody:***@")
    assert "secret" not in line and done.returncode == 1
    assert list(tmp_path.iterdir()) == []


def test_doctor_reports_an_unreachable_server_as_a_failed_check(tmp_path: Path) -> None:
    import subprocess

    from cli_helpers import cli_env, gormes_command

    done = subprocess.run(
        gormes_command("postgresql://nobody:secret@127.0.0.1:1/nowhere", "doctor", "--offline"),
        capture_output=True, text=True, env=cli_env(), timeout=60, cwd=tmp_path,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "FAIL  store.schema" in done.stdout and "cannot connect to PostgreSQL" in done.stdout
    assert "secret" not in done.stdout
    assert list(tmp_path.iterdir()) == []
