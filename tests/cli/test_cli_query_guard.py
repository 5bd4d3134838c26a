"""The read-only guard of `gormes query`, in process, against a real database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gormes.cli.query import open_read_only, run
from gormes.errors import ReadOnlyQuery, StoreError, UserError
from gormes.events.notes import NoteAdded
from gormes.events.sqlite_log import SQLiteLog


@pytest.fixture
def conn_and_guard(tmp_path: Path):
    path = tmp_path / "g.db"
    log = SQLiteLog(path)
    log.append_now("s-1", [NoteAdded(text="one"), NoteAdded(text="two")])
    log.close()
    conn, guard = open_read_only(path)
    yield conn, guard
    conn.close()


def test_select_runs(conn_and_guard) -> None:
    columns, rows = run(*conn_and_guard, "SELECT version, json_extract(data, '$.text') AS t "
                                         "FROM events ORDER BY position")
    assert columns == ["version", "t"]
    assert list(rows) == [(1, "one"), (2, "two")]


def test_recursive_cte_and_table_valued_functions_run(conn_and_guard) -> None:
    _, rows = run(*conn_and_guard, "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
                                   "FROM n WHERE x < 3) SELECT sum(x) FROM n")
    assert list(rows) == [(6,)]
    _, rows = run(*conn_and_guard, "SELECT count(*) FROM events, json_each(events.data)")
    assert list(rows) == [(8,)]


@pytest.mark.parametrize("sql", [
    "DELETE FROM events",
    "INSERT INTO tracking VALUES ('p', 1)",
    "UPDATE tracking SET position = 2",
    "DROP TABLE tracking",
    "CREATE VIEW v AS SELECT 1",
    "PRAGMA application_id = 1",
    "ATTACH ':memory:' AS m",
    "BEGIN IMMEDIATE",
    "SAVEPOINT x",
    "UPDATE sqlite_master SET sql = ''",
])
def test_writes_are_refused_before_they_run(conn_and_guard, sql: str) -> None:
    conn, guard = conn_and_guard
    with pytest.raises(ReadOnlyQuery, match="read-only"):
        run(conn, guard, sql)
    guard.refused = None
    _, rows = run(conn, guard, "SELECT count(*) FROM events")
    assert list(rows) == [(2,)]


def test_the_connection_is_read_only_even_without_the_guard(conn_and_guard) -> None:
    conn, _ = conn_and_guard
    conn.set_authorizer(None)
    with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
        conn.execute("DELETE FROM events")


def test_other_sql_errors_are_user_errors(conn_and_guard) -> None:
    with pytest.raises(UserError, match="no such table"):
        run(*conn_and_guard, "SELECT * FROM nosuch")


def test_missing_and_empty_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no gormes database"):
        open_read_only(tmp_path / "missing.db")
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StoreError, match="empty"):
        open_read_only(empty)
    assert empty.stat().st_size == 0
