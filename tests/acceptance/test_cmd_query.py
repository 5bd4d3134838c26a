"""`gormes query SQL`: reads work, anything that would write is refused (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, digest, json_lines, run_gormes


def test_query_json_rows(db: Path) -> None:
    result = run_gormes(db, "query", "--json",
                        "SELECT stream, count(*) AS n FROM events GROUP BY stream ORDER BY stream")
    assert result.returncode == 0, result.stderr
    assert json_lines(result.stdout) == [
        {"stream": "job-1", "n": 2}, {"stream": "job-2", "n": 1}, {"stream": "run-1", "n": 1},
    ]


def test_query_reads_event_data_with_json_extract(db: Path) -> None:
    result = run_gormes(db, "query", "--json",
                        "SELECT json_extract(data, '$.text') AS text FROM events WHERE position = 3")
    assert json_lines(result.stdout) == [{"text": "third"}]


def test_query_table_for_people(db: Path) -> None:
    result = run_gormes(db, "query", "SELECT position, stream FROM events WHERE version = 2")
    assert result.returncode == 0, result.stderr
    assert "position" in result.stdout and "job-1" in result.stdout
    assert "(1 row)" in result.stdout


def test_reporting_pragmas_are_allowed(db: Path) -> None:
    result = run_gormes(db, "query", "--json", "PRAGMA table_info(events)")
    assert result.returncode == 0, result.stderr
    assert [row["name"] for row in json_lines(result.stdout)][:3] == ["position", "stream", "version"]
    version = run_gormes(db, "query", "--json", "PRAGMA user_version")
    assert json_lines(version.stdout) == [{"user_version": 1}]


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("INSERT INTO events(stream, version, type, data, recorded_at) VALUES ('s', 1, 't', '{}', 0)",
         "INSERT"),
        ("UPDATE events SET stream = 'x'", "UPDATE"),
        ("DELETE FROM events", "DELETE"),
        ("DROP TABLE events", "schema change"),
        ("CREATE TABLE t(x)", "schema change"),
        ("CREATE TEMP TABLE t(x)", "schema change"),
        ("CREATE INDEX i ON events(type)", "schema change"),
        ("ALTER TABLE events ADD COLUMN x", "ALTER TABLE"),
        ("ATTACH DATABASE ':memory:' AS other", "ATTACH"),
        ("PRAGMA user_version = 7", "PRAGMA user_version = 7"),
        ("PRAGMA journal_mode = DELETE", "PRAGMA journal_mode"),
        ("PRAGMA query_only = 0", "PRAGMA query_only"),
        ("PRAGMA wal_checkpoint", "PRAGMA wal_checkpoint"),
        ("VACUUM", "VACUUM"),
        ("REINDEX", "REINDEX"),
        ("ANALYZE", "ANALYZE"),
        ("WITH x AS (SELECT 1) DELETE FROM events", "DELETE"),
    ],
)
def test_write_statements_are_refused(db: Path, sql: str, named: str) -> None:
    before = digest(db)
    result = run_gormes(db, "query", sql)
    line = assert_one_line_error(result)
    assert result.returncode == 2
    assert "read-only" in line or "readonly" in line
    if named != "VACUUM":
        assert named in line
    assert digest(db) == before
    count = run_gormes(db, "query", "--json", "SELECT count(*) AS n FROM events")
    assert json_lines(count.stdout) == [{"n": 4}]


def test_bad_sql_is_one_line(db: Path) -> None:
    assert "syntax error" in assert_one_line_error(run_gormes(db, "query", "SELEC 1"))
    assert "one statement" in assert_one_line_error(run_gormes(db, "query", "SELECT 1; SELECT 2"))
    assert "no such table" in assert_one_line_error(run_gormes(db, "query", "SELECT * FROM nope"))
