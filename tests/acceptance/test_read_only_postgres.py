"""The reads on a PostgreSQL database this session may not write: a role granted
SELECT only (an auditor's), a session whose transactions are read-only (as on a
standby, a read replica). An operator's finding: `jobs list`, `jobs stats`,
`runs list`, `cron list` and `top` failed there with "permission denied for
table events", because the job ledger was set up through the writer. Such a
session now opens the store read-only, as an SQLite file the process cannot
write: what is set up and current is read as it is, every write is one line
that says why it cannot be made, and nothing is written."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cli_helpers import assert_one_line_error, run_gormes
from pg_helpers import admin, as_role, fresh_schema, login_role, url_for_schema


def ok(url: str, *args: str) -> str:
    done = run_gormes(url, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def read_only_session(url: str) -> str:
    return f"{url}%20-cdefault_transaction_read_only%3Don"


def event_count(schema: str) -> int:
    return admin(f'SELECT count(*) FROM "{schema}".events')[0][0]


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        yield name


@pytest.fixture
def reader(schema: str) -> Iterator[str]:
    """A role that may read the schema's tables and write none (granted after the
    writer made them, as an operator grants an auditor)."""
    with login_role(prefix="gormes_reader") as role:
        yield role


def grant_reads(schema: str, role: str) -> None:
    admin(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
    admin(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')


def test_a_role_that_may_only_read_runs_the_reads(schema: str, reader: str):
    url = url_for_schema(schema)
    job = ok(url, "jobs", "submit", "echo", "--data", '{"n": 1}').strip()
    ok(url, "cron", "add", "nightly", "--schedule", "0 3 * * *", "--job", "echo")
    listed, stats = ok(url, "jobs", "list", "--json"), ok(url, "jobs", "stats", "--json")
    runs, cron = ok(url, "runs", "list", "--json"), ok(url, "cron", "list", "--json")  # built here
    grant_reads(schema, reader)
    before = event_count(schema)
    audit = as_role(url, reader)
    assert ok(audit, "jobs", "list", "--json") == listed
    assert ok(audit, "jobs", "stats", "--json") == stats
    assert json.loads(ok(audit, "jobs", "get", job, "--json"))["id"] == job
    assert ok(audit, "runs", "list", "--json") == runs
    assert ok(audit, "cron", "list", "--json") == cron
    assert json.loads(ok(audit, "top", "--once", "--json"))["by_status"]["waiting"] == 1
    assert event_count(schema) == before


def test_a_write_by_a_role_that_may_only_read_says_why(schema: str, reader: str):
    url = url_for_schema(schema)
    ok(url, "jobs", "submit", "echo")
    grant_reads(schema, reader)
    before = event_count(schema)
    for args in (("jobs", "submit", "echo"), ("cron", "add", "n", "--schedule", "0 3 * * *", "--job", "echo"),
                 ("budget", "list"),  # an audited read is a write too
                 ("projections", "rebuild")):  # a write-ahead call: no open calls' index tried first
        done = run_gormes(as_role(url, reader), *args)
        assert done.returncode == 1, done.stderr
        line = assert_one_line_error(done)
        assert f"is read-only here (role {reader} may not insert into its events table)" in line, line
    assert event_count(schema) == before


def test_a_read_only_session_reads_and_refuses_writes(schema: str):
    url = url_for_schema(schema)
    ok(url, "jobs", "submit", "echo")
    listed = ok(url, "jobs", "list", "--json")
    before = event_count(schema)
    standby_like = read_only_session(url)
    assert ok(standby_like, "jobs", "list", "--json") == listed
    line = assert_one_line_error(run_gormes(standby_like, "jobs", "submit", "echo"))
    assert "is read-only here (the session's transactions are read-only" in line, line
    assert event_count(schema) == before


def test_an_empty_schema_read_only_is_one_line_and_stays_empty(schema: str):
    standby_like = read_only_session(url_for_schema(schema))
    line = assert_one_line_error(run_gormes(standby_like, "jobs", "submit", "echo"))
    assert "no gormes database at" in line and "and none can be made there (the session's" in line, line
    line = assert_one_line_error(run_gormes(standby_like, "jobs", "list"))
    assert "no gormes database at" in line, line
    assert admin("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)) == [(0,)]


def test_a_ledger_never_set_up_is_one_line(schema: str, reader: str):
    url = url_for_schema(schema)
    ok(url, "append", "notes-1", "note.added", "--data", '{"text": "a"}')  # a log no job command opened
    grant_reads(schema, reader)
    line = assert_one_line_error(run_gormes(as_role(url, reader), "jobs", "list"))
    assert line.endswith("is read-only and its job ledger is not set up for this gormes:"
                         " open it once where it can be written"), line


def test_a_projection_behind_the_log_is_one_line(schema: str, reader: str):
    url = url_for_schema(schema)
    ok(url, "jobs", "submit", "echo")
    ok(url, "runs", "list")  # the runs projection built, at the head
    ok(url, "append", "run-x", "run.started", "--data", '{"run_id": "x", "handler": "h", "handler_version": "1"}')
    grant_reads(schema, reader)
    done = run_gormes(as_role(url, reader), "runs", "list")
    assert done.returncode == 1
    line = assert_one_line_error(done)
    assert "is read-only and its 'runs' projection is behind the log" in line, line
    assert ok(as_role(url, reader), "jobs", "list", "--json")  # the ledger is inline: current
