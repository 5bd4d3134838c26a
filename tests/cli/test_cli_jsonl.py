"""The JSONL functions behind `gormes export`, `import` and `tail --json`, run
in process against real database files."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gormes.errors import UserError
from gormes.events import jsonl
from gormes.events.notes import NoteAdded
from gormes.events.sqlite_log import SQLiteLog


@pytest.fixture
def log(tmp_path: Path):
    log = SQLiteLog(tmp_path / "g.db")
    for i in range(7):
        log.append_now(f"job-{i % 3}", [NoteAdded(text=f"n{i}")])
    yield log
    log.close()


def test_pages_cover_the_snapshot_once_with_limits(log: SQLiteLog) -> None:
    def positions(**kw) -> list[list[int]]:
        return [[r.position for r in page] for page in jsonl.pages(log, **kw)]

    assert positions(page=3) == [[1, 2, 3], [4, 5, 6], [7]]
    assert positions(page=3, limit=4) == [[1, 2, 3], [4]]
    assert positions(page=2, after=5) == [[6, 7]]
    assert positions(page=2, upto=3) == [[1, 2], [3]]
    assert positions(page=2, streams=["job-1"]) == [[2, 5]]
    assert positions(limit=0) == []


def test_to_line_copies_the_stored_json(log: SQLiteLog) -> None:
    [record] = jsonl.select(log, 0, limit=1)
    stored = log.conn.execute("SELECT data FROM events WHERE position = 1").fetchone()[0]
    line = jsonl.to_line(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert stored.encode() in line
    assert json.loads(line)["data"] == json.loads(stored)


def test_a_decoded_record_gives_the_same_line(log: SQLiteLog) -> None:
    raw = jsonl.select(log, 0, limit=1)[0]
    decoded = log.read_all(limit=1)[0]
    assert jsonl.to_line(decoded) == jsonl.to_line(raw)


def test_export_then_import_into_a_fresh_log(log: SQLiteLog, tmp_path: Path) -> None:
    out = io.BytesIO()
    pages_seen = []
    assert jsonl.export(log, out, on_page=pages_seen.append) == 7
    assert pages_seen == [7]
    copy = SQLiteLog(tmp_path / "copy.db")
    try:
        parsed = jsonl.parse_lines(out.getvalue().splitlines())
        result = jsonl.import_lines(copy, parsed)
        assert (result.imported, result.first_position, result.last_position) == (7, 1, 7)
        assert [(r.stream, r.version, r.event) for r in copy.read_all()] == [
            (r.stream, r.version, r.event) for r in log.read_all()
        ]
    finally:
        copy.close()


def test_import_is_all_or_nothing(log: SQLiteLog) -> None:
    lines = [
        json.dumps({"stream": "new", "type": "note.added", "data": {"text": "a"}, "version": 1}),
        json.dumps({"stream": "job-0", "type": "note.added", "data": {"text": "b"}, "version": 1}),
    ]
    parsed = jsonl.parse_lines(lines)
    with pytest.raises(UserError, match="line 2: stream 'job-0' is at version 3"):
        jsonl.import_lines(log, parsed)
    assert log.head() == 7 and not log.conn.in_transaction
    result = jsonl.import_lines(log, parsed, check_versions=False)
    assert (result.first_position, result.last_position) == (8, 9)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[]", "line 4: Expected `object`"),
        ('{"stream": "s", "type": "note.added", "data": {"text": "x"}, "version": 0}',
         "line 4: version must be at least 1"),
        ('{"stream": "s", "type": "note.added", "data": {"text": "x"}, "schema_version": 9}',
         "line 4: 'note.added' data has schema version 9"),
    ],
)
def test_parse_line_names_the_line(line: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        jsonl.parse_line(4, line)


GLOB_PATTERNS = st.text(alphabet="ab-*?[]^!", min_size=1, max_size=6)
NAMES = st.text(alphabet="ab-[]^!", max_size=6)


@given(pattern=GLOB_PATTERNS, name=NAMES)
def test_stream_matcher_agrees_with_sqlite_glob(pattern: str, name: str) -> None:
    conn = sqlite3.connect(":memory:")
    try:
        if any(c in pattern for c in "*?["):
            in_sql = conn.execute("SELECT ? GLOB ?", (name, pattern)).fetchone()[0] == 1
        else:
            in_sql = name == pattern
    finally:
        conn.close()
    assert jsonl.stream_matcher([pattern])(name) == in_sql


def test_appends_after_an_import_continue_each_stream(log: SQLiteLog) -> None:
    line = json.dumps({"stream": "job-0", "type": "note.added", "data": {"text": "i"}})
    jsonl.import_lines(log, jsonl.parse_lines([line, line]))
    result = log.append_now("job-0", [NoteAdded(text="after")], expected_version=5)
    assert (result.first_position, result.version) == (10, 6)
