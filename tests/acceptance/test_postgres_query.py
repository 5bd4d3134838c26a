"""`gormes query` on PostgreSQL: the real CLI in subprocesses against a fresh
schema holding the SAMPLE notes; every write is refused by the server and
changes nothing."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_helpers import admin, fresh_schema, url_for_schema

from cli_helpers import assert_one_line_error, cli_env, gormes_command, json_lines, write_sample


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        write_sample(url_for_schema(name))
        yield name


def query(db: str | Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gormes_command(db, "query", *args), capture_output=True, text=True,
                          env=cli_env(), cwd=cwd, timeout=60)


def state(schema: str) -> list[tuple]:
    """Everything a write could change: the schema's tables, the log, the sequences."""
    tables = admin("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                   "ORDER BY 1", (schema,))
    events = admin(f'SELECT position, stream, version, type, data FROM "{schema}".events ORDER BY 1')
    meta = admin(f'SELECT key, value FROM "{schema}".gormes_meta ORDER BY 1')
    return [*tables, *events, *meta]


def test_rows_as_json_are_the_same_as_on_sqlite(schema: str, db: Path, tmp_path: Path):
    sql = "SELECT stream, count(*) AS n, max(version) AS v FROM events GROUP BY stream ORDER BY stream"
    pg = query(url_for_schema(schema), "--json", sql, cwd=tmp_path)
    lite = query(db, "--json", sql, cwd=tmp_path)
    assert pg.returncode == 0, pg.stderr
    assert pg.stdout == lite.stdout
    assert json_lines(pg.stdout) == [
        {"stream": "job-1", "n": 2, "v": 2}, {"stream": "job-2", "n": 1, "v": 1},
        {"stream": "run-1", "n": 1, "v": 1},
    ]


def test_postgres_types_in_json_and_in_the_table(schema: str, tmp_path: Path):
    url = url_for_schema(schema)
    done = query(url, "--json", "SELECT sum(position) AS total, avg(version) AS mean, "
                 "data::jsonb AS data, data::jsonb ->> 'text' AS text, 'a%' LIKE 'a%%' AS percent "
                 "FROM events WHERE position = 3 GROUP BY data", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (row,) = json_lines(done.stdout)
    assert row["total"] == 3 and row["mean"] == 1 and row["text"] == "third"
    assert row["data"]["text"] == "third" and row["percent"] is True
    table = query(url, "SELECT position, stream FROM events WHERE version = 2", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "position" in table.stdout and "job-1" in table.stdout and "(1 row)" in table.stdout


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO events VALUES (9, 's', 1, 't', 1, '{}', 0)",
        "UPDATE events SET stream = 'x'",
        "DELETE FROM events",
        "WITH x AS (DELETE FROM events RETURNING 1) SELECT count(*) FROM x",
        "TRUNCATE events",
        "DROP TABLE events",
        "CREATE TABLE t(x int)",
        "CREATE TEMP TABLE t(x int)",
        "CREATE INDEX i ON events(stream)",
        "ALTER TABLE events ADD COLUMN x int",
        "SELECT * FROM events FOR UPDATE",
        "SET TRANSACTION READ WRITE",
        "SET transaction_read_only = off",
        "DO $$ BEGIN DELETE FROM events; END $$",
    ],
)
def test_write_statements_are_refused_by_the_server(schema: str, tmp_path: Path, sql: str):
    before = state(schema)
    line = assert_one_line_error(query(url_for_schema(schema), sql, cwd=tmp_path))
    assert line.startswith("gormes: error: refused: the query would write (")
    assert line.endswith("gormes query is read-only")
    assert state(schema) == before


def test_a_second_statement_is_refused_before_anything_runs(schema: str, tmp_path: Path):
    before = state(schema)
    done = query(url_for_schema(schema), "SELECT 1; DELETE FROM events", cwd=tmp_path)
    assert "one statement at a time" in assert_one_line_error(done)
    assert done.returncode == 2
    assert state(schema) == before


def test_bad_sql_and_a_schema_without_gormes_are_one_line(schema: str, tmp_path: Path):
    url = url_for_schema(schema)
    bad = query(url, "SELEC 1", cwd=tmp_path)
    assert "query failed: syntax error" in assert_one_line_error(bad) and bad.returncode == 2
    missing = query(url, "SELECT * FROM nope", cwd=tmp_path)
    assert 'relation "nope" does not exist' in assert_one_line_error(missing)
    with fresh_schema() as empty:
        done = query(url_for_schema(empty), "SELECT 1", cwd=tmp_path)
        assert "no gormes database at" in assert_one_line_error(done) and done.returncode == 1
        assert admin("SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
                     (empty,)) == [(0,)]
    assert list(tmp_path.iterdir()) == []  # no SQLite file was made


def test_a_large_result_is_streamed_and_an_empty_one_keeps_its_columns(schema: str, tmp_path: Path):
    url = url_for_schema(schema)
    # more rows than one chunk of the stream, in order, each once
    many = query(url, "--json", "SELECT n, repeat('x', 100) AS pad FROM generate_series(1, 25000) AS n "
                 "ORDER BY n", cwd=tmp_path)
    assert many.returncode == 0, many.stderr
    assert [row["n"] for row in json_lines(many.stdout)] == list(range(1, 25001))
    # no row: the table still has its header
    empty = query(url, "SELECT stream, version FROM events WHERE false", cwd=tmp_path)
    assert empty.returncode == 0, empty.stderr
    assert "stream" in empty.stdout and "version" in empty.stdout and "(0 rows)" in empty.stdout
    assert query(url, "--json", "SELECT 1 WHERE false", cwd=tmp_path).stdout == ""
    # a statement with no result at all (allowed in a read-only transaction): no rows
    setting = query(url, "--json", "SET statement_timeout = 0", cwd=tmp_path)
    assert (setting.returncode, setting.stdout) == (0, ""), setting.stderr
    # an error met while the rows stream is one line
    failing = query(url, "--json", "SELECT 1 / (3 - n) AS x FROM generate_series(1, 5) AS n", cwd=tmp_path)
    assert "query failed: division by zero" in assert_one_line_error(failing)
    assert failing.returncode == 2
