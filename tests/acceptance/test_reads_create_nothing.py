"""A read command on a database that is not there says so and creates nothing (an
operator's finding: `jobs list` on a mistyped --db printed an empty ledger, exit 0,
and left a new file behind; on PostgreSQL it created the schema's tables)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, run_gormes
from pg_helpers import admin, fresh_schema, url_for_schema

READS = [
    ("jobs", "list"), ("jobs", "list", "--json"), ("jobs", "stats"), ("jobs", "get", "X"),
    ("jobs", "inbox", "X"), ("jobs", "wait", "X"), ("runs", "list"), ("runs", "list", "--json"),
    ("cron", "list"), ("budget", "list"), ("budget", "show", "b"), ("approvals", "list"),
    ("recall", "tea"), ("events",), ("runs", "show", "X"), ("projections", "status"),
    ("skills", "usage"), ("skills", "usage", "--json"),
]


@pytest.mark.parametrize("args", READS, ids=[" ".join(a) for a in READS])
def test_a_read_on_a_missing_sqlite_file_creates_nothing(tmp_path: Path, args: tuple[str, ...]):
    db = tmp_path / "typo" / "gormes.db"
    done = run_gormes(db, *args)
    assert done.returncode == 1, done
    assert assert_one_line_error(done) == f"gormes: error: no gormes database at {db}"
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("args", [("jobs", "list"), ("jobs", "stats"), ("runs", "list"), ("cron", "list"),
                                  ("budget", "list")])
def test_a_read_on_an_empty_postgresql_schema_creates_no_table(args: tuple[str, ...]):
    with fresh_schema() as schema:
        done = run_gormes(url_for_schema(schema), *args)
        assert done.returncode == 1, done
        assert "no gormes database at" in assert_one_line_error(done)
        assert admin("SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", (schema,)) == [(0,)]


def test_a_write_still_creates_the_database(tmp_path: Path):
    db = tmp_path / "new" / "gormes.db"
    assert run_gormes(db, "jobs", "submit", "echo").returncode == 0
    listed = run_gormes(db, "jobs", "list")
    assert listed.returncode == 0 and "echo" in listed.stdout
