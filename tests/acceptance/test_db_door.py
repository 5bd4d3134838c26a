"""What `--db` (GORMES_DB, `migrate --from/--to`) takes, read at one place
(`gormes.events.open.store_target`, decision 0089), through the real CLI.

A user's audit: a mistyped or unsupported URL (`postgresq://...`, `mysql://...`)
and a libpq keyword string became a new SQLite file named after them (exit 0:
the job was lost to the real workers), a keyword string's password was printed
and used as a file name, `ops call` of a read and `memory mirror` made a
database at a mistyped path, and `replay`/`top --once` said `no database at`
with exit 2 where every other read says `no gormes database at` with exit 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, cli_env, run_gormes
from pg_helpers import PG_URL, admin, fresh_schema, url_for_schema

ACCEPTED = "a postgresql:// (or postgres://) URL, an SQLite file path, or sqlite:PATH"
SECRET = "hunter2"
KEYWORDS = f"host=127.0.0.1 user=postgres password={SECRET} dbname=test"
NOT_OURS = ["postgresq://postgres@127.0.0.1:5432/test", "mysql://h/d", "mysql://me:hunter2@h/d",
            "POSTGRESQL://postgres@127.0.0.1:5432/test", "file:///tmp/gormes.db"]


def left_behind(where: Path) -> list[str]:
    return sorted(str(p.relative_to(where)) for p in where.rglob("*"))


def run_with_gormes_db(value: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """gormes with GORMES_DB=value and no --db; the default database, were it
    used, would be under `cwd` too."""
    env = {**cli_env(), "GORMES_DB": value, "XDG_DATA_HOME": str(cwd / "xdg")}
    return subprocess.run([sys.executable, "-m", "gormes", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60)


@pytest.mark.parametrize("value", NOT_OURS)
def test_a_url_gormes_does_not_open_is_refused_not_made_a_file(tmp_path: Path, value: str):
    done = run_gormes(value, "jobs", "submit", "a", cwd=tmp_path)
    line = assert_one_line_error(done)
    assert done.returncode == 2, done
    assert line.startswith("gormes: error: --db ") and "is a URL gormes does not open" in line, line
    assert line.endswith(f"give {ACCEPTED}"), line
    assert SECRET not in line, line
    assert left_behind(tmp_path) == []


def test_gormes_db_names_itself_in_the_refusal(tmp_path: Path):
    done = run_with_gormes_db("postgresq://postgres@127.0.0.1:5432/test", "jobs", "submit", "a", cwd=tmp_path)
    line = assert_one_line_error(done)
    assert done.returncode == 2 and line.startswith("gormes: error: GORMES_DB 'postgresq://"), line
    assert left_behind(tmp_path) == []


@pytest.mark.parametrize("args", [("events",), ("jobs", "submit", "a"), ("jobs", "list")])
def test_a_keyword_string_is_refused_and_its_password_never_shown(tmp_path: Path, args: tuple[str, ...]):
    for done in (run_gormes(KEYWORDS, *args, cwd=tmp_path), run_with_gormes_db(KEYWORDS, *args, cwd=tmp_path)):
        line = assert_one_line_error(done)
        assert done.returncode == 2, done
        assert SECRET not in done.stderr and "password=***" in line, line
        assert "is a libpq keyword string, which gormes does not take" in line, line
        assert ACCEPTED in line, line
        assert left_behind(tmp_path) == []


@pytest.mark.parametrize("option", ["--from", "--to"])
def test_migrate_refuses_a_keyword_string_without_echoing_its_password(tmp_path: Path, option: str):
    source, target = "sqlite:k.db", KEYWORDS
    if option == "--from":
        source, target = KEYWORDS, PG_URL
    done = run_gormes(tmp_path / "unused.db", "migrate", "--from", source, "--to", target, cwd=tmp_path)
    line = assert_one_line_error(done)
    assert done.returncode == 2, done
    assert SECRET not in done.stderr and line.startswith(f"gormes: error: {option} '"), line
    assert "libpq keyword string" in line, line
    assert left_behind(tmp_path) == []


def test_migrate_refuses_a_mistyped_target_url_with_its_password_masked(tmp_path: Path):
    done = run_gormes(tmp_path / "unused.db", "migrate", "--from", "sqlite:k.db",
                      "--to", f"postgresq://postgres:{SECRET}@127.0.0.1/test", cwd=tmp_path)
    line = assert_one_line_error(done)
    assert done.returncode == 2 and SECRET not in done.stderr, done
    assert "--to 'postgresq://postgres:***@127.0.0.1/test' is a URL gormes does not open" in line, line


READS = [
    ("ops", "call", "memory.recall", '{"query": "x"}'),
    ("memory", "mirror", "--out", "MIRROR"),
    ("replay", "r1"),
    ("top", "--once"),
    ("fork", "r1", "--at", "1"),
    ("eval", "runs", "r1", "--model", "scripted:none"),
]


@pytest.mark.parametrize("args", READS, ids=[" ".join(a[:3]) for a in READS])
def test_a_read_on_a_missing_database_says_so_and_creates_nothing(tmp_path: Path, args: tuple[str, ...]):
    db = tmp_path / "typo" / "gormes.db"
    args = tuple(str(tmp_path / "mirror") if a == "MIRROR" else a for a in args)
    done = run_gormes(db, *args, cwd=tmp_path)
    assert assert_one_line_error(done) == f"gormes: error: no gormes database at {db}"
    assert done.returncode == 1, done
    assert left_behind(tmp_path) == []


def test_a_mirror_from_a_mistyped_db_does_not_empty_the_mirror(tmp_path: Path):
    db, out = tmp_path / "gormes.db", tmp_path / "mirror"
    assert run_gormes(db, "memory", "add-entity", "Ada", cwd=tmp_path).returncode == 0
    assert run_gormes(db, "memory", "mirror", "--out", str(out), cwd=tmp_path).returncode == 0
    pages = left_behind(out)
    assert len(pages) >= 2, pages  # USER.md and Ada's page
    done = run_gormes(tmp_path / "gormse.db", "memory", "mirror", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 1 and "no gormes database at" in assert_one_line_error(done)
    assert left_behind(out) == pages
    assert not (tmp_path / "gormse.db").exists()


@pytest.mark.parametrize("call", [("job.submit", '{"name": "echo"}'), ("time.now", "{}")])
def test_a_call_not_made_from_the_log_still_creates_the_database(tmp_path: Path, call: tuple[str, str]):
    """Its audit record is written: a user's own tool tried first (docs/tools.md's
    `ops call weather.get`) must not be told there is no database."""
    db = tmp_path / "new" / "gormes.db"
    done = run_gormes(db, "ops", "call", *call, cwd=tmp_path)
    assert done.returncode == 0, done
    assert db.exists()


def test_a_plain_path_and_sqlite_path_name_the_same_file(tmp_path: Path):
    submitted = run_gormes("sqlite:k.db", "jobs", "submit", "a", cwd=tmp_path)
    assert submitted.returncode == 0, submitted
    assert left_behind(tmp_path) == ["k.db"]  # not a file named `sqlite:k.db`
    listed = run_gormes("k.db", "jobs", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed
    assert [job["name"] for job in json.loads(listed.stdout)] == ["a"]


def test_a_postgresql_url_still_selects_postgresql(tmp_path: Path):
    with fresh_schema() as schema:
        url = url_for_schema(schema)
        assert url.startswith("postgresql://")
        submitted = run_gormes(url, "jobs", "submit", "a", cwd=tmp_path)
        assert submitted.returncode == 0, submitted
        assert admin(f'SELECT count(*) FROM "{schema}".events WHERE type = %s', ("job.submitted",)) == [(1,)]
        listed = run_gormes(url.replace("postgresql://", "postgres://", 1), "jobs", "list", "--json", cwd=tmp_path)
        assert [job["name"] for job in json.loads(listed.stdout)] == ["a"], listed
    assert left_behind(tmp_path) == []
