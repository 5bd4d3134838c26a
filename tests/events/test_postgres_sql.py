"""One SQL text for both stores: SQLite-style SQL run on PostgreSQL through
PortableConnection (the translation is checked on its own and on the real server)."""

from __future__ import annotations

import psycopg
import pytest
from pg_helpers import PG_URL, require_postgres

from gormes.events.postgres_sql import PortableConnection, dialect_of, to_psycopg


@pytest.mark.parametrize(("sqlite", "psycopg_sql"), [
    ("SELECT * FROM jobs WHERE id = ? AND n > ?", "SELECT * FROM jobs WHERE id = %s AND n > %s"),
    ("SELECT 1 WHERE type LIKE 'job.%'", "SELECT 1 WHERE type LIKE 'job.%%'"),
    ("SELECT '?', \"a?b\", ? FROM t", "SELECT '?', \"a?b\", %s FROM t"),
    ("SELECT 'it''s ?', ?", "SELECT 'it''s ?', %s"),
    ("SELECT 5 % ?", "SELECT 5 %% %s"),
])
def test_placeholders_become_psycopgs_and_literal_percents_are_doubled(sqlite, psycopg_sql):
    assert to_psycopg(sqlite) == psycopg_sql


def test_the_same_text_runs_on_the_server():
    require_postgres()
    with psycopg.connect(PG_URL, autocommit=True) as raw:
        conn = PortableConnection(raw)
        assert dialect_of(conn) == "postgres" and dialect_of(object()) == "sqlite"
        row = conn.execute(
            "SELECT ?, '?', 'job.x' LIKE 'job.%', 7 % 4, ? || '%'", ("a", "b")
        ).fetchone()
        assert row == ("a", "?", True, 3, "b%")
        assert conn.execute("SELECT 'no params, 100%'").fetchone() == ("no params, 100%",)
        assert conn.closed is False and conn.raw is raw  # the rest is psycopg's own


def test_a_nul_in_a_text_parameter_goes_as_u_fffd_and_is_found_by_the_same_text():
    """PostgreSQL's text cannot hold U+0000; a projection of a log written on SQLite
    may be given one (decision 0078). Writes and lookups map it alike; other
    parameters go as they are."""
    require_postgres()
    with psycopg.connect(PG_URL) as raw:  # rolled back at the end: nothing is left behind
        conn = PortableConnection(raw)
        conn.execute("CREATE TEMP TABLE nul_text(name TEXT PRIMARY KEY, n BIGINT, b BYTEA)")
        conn.executemany("INSERT INTO nul_text VALUES (?, ?, ?)", [("a\x00b", 1, b"\x00"), ("plain", 2, None)])
        conn.execute("INSERT INTO nul_text VALUES (?, ?, ?)", ("\x00", 3, None))
        assert conn.execute("SELECT n, b FROM nul_text WHERE name = ?", ("a\x00b",)).fetchone() == (1, b"\x00")
        assert conn.execute("SELECT n FROM nul_text WHERE name = ?", ("a\ufffdb",)).fetchone() == (1,)
        assert sorted(conn.execute("SELECT name FROM nul_text WHERE name = ANY(?)", (["a\x00b", "\x00"],))) == [
            ("a\ufffdb",), ("\ufffd",)]
        assert list(conn.stream("SELECT n FROM nul_text WHERE name = ?", ("\x00",))) == [(3,)]
        raw.rollback()
