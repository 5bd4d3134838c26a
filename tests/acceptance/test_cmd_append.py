"""`gormes append STREAM TYPE --data JSON`."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, digest, json_lines, run_gormes

from gormes.events.notes import NoteAdded
from gormes.events.sqlite_log import SQLiteLog


def read_back(db: Path) -> list:
    log = SQLiteLog(db, readonly=True)
    try:
        # Each append is also one audit event (audit-* streams), written after it.
        return [r for r in log.read_all() if not r.stream.startswith("audit-")]
    finally:
        log.close()


def test_append_creates_the_database_and_the_event(tmp_path: Path) -> None:
    db = tmp_path / "new" / "gormes.db"
    result = run_gormes(db, "append", "job-7", "note.added",
                        "--data", '{"text": "hi", "tags": ["a", "b"]}')
    assert result.returncode == 0, result.stderr
    assert "position 1" in result.stdout and "version 1" in result.stdout
    [record] = read_back(db)
    assert (record.position, record.stream, record.version) == (1, "job-7", 1)
    assert record.event == NoteAdded(text="hi", tags=("a", "b"))


def test_append_json_prints_the_event_as_tail_would(db: Path) -> None:
    result = run_gormes(db, "append", "job-1", "note.added", "--data", '{"text": "fifth"}',
                        "--json")
    assert result.returncode == 0, result.stderr
    [line] = json_lines(result.stdout)
    assert line["position"] == 5 and line["stream"] == "job-1" and line["version"] == 3
    assert line["data"]["text"] == "fifth"
    tail = json_lines(run_gormes(db, "tail", "--json", "--after", "4").stdout)
    assert tail[0] == line and [t["type"] for t in tail[1:]] == ["audit.operation"]


def test_append_reads_data_from_stdin(db: Path) -> None:
    result = run_gormes(db, "append", "s-1", "note.added", "--data", "-",
                        input='{"text": "from stdin"}')
    assert result.returncode == 0, result.stderr
    assert read_back(db)[-1].event == NoteAdded(text="from stdin")


def test_expected_version_is_checked(db: Path) -> None:
    ok = run_gormes(db, "append", "job-1", "note.added", "--data", '{"text": "x"}',
                    "--expected-version", "2")
    assert ok.returncode == 0, ok.stderr
    before = read_back(db)
    stale = run_gormes(db, "append", "job-1", "note.added", "--data", '{"text": "y"}',
                       "--expected-version", "2")
    line = assert_one_line_error(stale)
    assert "version 3" in line and "expected 2" in line
    assert read_back(db) == before  # its audit record aside
    new_stream = run_gormes(db, "append", "job-9", "note.added", "--data", '{"text": "z"}',
                            "--expected-version", "0")
    assert new_stream.returncode == 0, new_stream.stderr


@pytest.mark.parametrize(
    ("type_", "data", "expected"),
    [
        ("note.added", '{"text": "unterminated', "malformed JSON"),
        ("note.added", "not json at all", "malformed JSON"),
        ("no.such.type", '{"text": "x"}', "unknown event type 'no.such.type'"),
        ("note.added", '{"txt": "x"}', "missing required field `text`"),
        ("note.added", '{"text": 42}', "Expected `str`, got `int`"),
        ("note.added", '["text"]', "must be a JSON object"),
    ],
)
def test_bad_event_data_is_refused_and_writes_nothing(
    db: Path, type_: str, data: str, expected: str
) -> None:
    before = read_back(db)
    line = assert_one_line_error(run_gormes(db, "append", "job-1", type_, "--data", data))
    assert expected in line
    assert read_back(db) == before  # a refusal the operation makes is one audit record


def test_bad_data_does_not_create_a_database(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    assert_one_line_error(run_gormes(db, "append", "s", "note.added", "--data", "{"))
    assert not db.exists()


def test_empty_stream_name_is_refused(db: Path) -> None:
    before = digest(db)
    assert "STREAM" in assert_one_line_error(run_gormes(db, "append", "", "note.added",
                                                        "--data", '{"text": "x"}'))
    assert digest(db) == before
