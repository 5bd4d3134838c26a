"""A PostgreSQL role the open calls' index cannot be kept by (decision 0067's
third addendum): a deployment's worker role granted the schema's tables before
the index was made (it is made at the first write-ahead call, by whichever role
makes it), so it may write the log but not the index. Its write-ahead calls were
recorded with no row in the index, and a call it did not finish (its process
killed after the effect) was missing from the owner's `gormes audit unfinished`
and the doctor, which trust the index: a silent hole in the audit. Such a call is
now refused before it runs, with one line naming the grant; once granted, it is
indexed and listed. An import by that role of records holding such calls is
refused the same way."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, run_gormes
from pg_helpers import admin, as_role, fresh_schema, login_role, url_for_schema

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "acceptance"))
from test_user_operation_write_ahead import notes_file  # noqa: E402

INDEX = "audit_open_v2"


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        yield name


def worker_grants(schema: str) -> tuple[str, ...]:
    """What an operator grants a worker role on a schema gormes set up: every table
    and sequence there is now (the index is not yet among them)."""
    return (f'GRANT USAGE ON SCHEMA "{schema}" TO {{role}}',
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO {{role}}',
            f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA "{schema}" TO {{role}}')


def unfinished(url: str) -> list[tuple[str, str]]:
    done = run_gormes(url, "audit", "unfinished", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "read from the index, as the owner may"
    return [(r["operation"], r["outcome"]) for r in map(json.loads, done.stdout.splitlines())]


def started_records(schema: str) -> int:
    return admin(f"SELECT count(*) FROM \"{schema}\".events WHERE type = 'audit.operation'"
                 " AND data::jsonb->>'outcome' = 'started'")[0][0]


def test_a_role_that_may_not_keep_the_index_is_refused_its_write_ahead_call(schema: str, tmp_path: Path):
    url = url_for_schema(schema)
    notes, note = notes_file(tmp_path)
    assert run_gormes(url, "jobs", "submit", "echo").returncode == 0  # the schema set up, by its owner
    with login_role(*worker_grants(schema), prefix="gormes_worker") as role:
        done = run_gormes(url, "ops", "call", "notes.write", '{"text": "owner"}', "--import", str(notes))
        assert done.returncode == 0, done.stderr  # the owner's first write-ahead call made the index
        assert admin(f"SELECT tableowner FROM pg_tables WHERE schemaname = '{schema}' AND tablename = '{INDEX}'")
        worker = as_role(url, role)
        killed = run_gormes(worker, "ops", "call", "notes.write", '{"text": "worker", "crash": true}',
                            "--import", str(notes))
        line = assert_one_line_error(killed)
        assert killed.returncode == 1, killed
        assert f"database role '{role}' may not keep the open calls' index {schema}.{INDEX}" in line, line
        assert f'GRANT SELECT, INSERT, DELETE ON "{schema}".{INDEX} TO "{role}"' in line, line
        assert note.read_text() == "owner", "the call did not run"
        assert started_records(schema) == 1, "the owner's, whose outcome is recorded"
        [refused] = admin(f"SELECT data::jsonb->>'outcome', data::jsonb->>'allowed' FROM \"{schema}\".events"
                          " WHERE type = 'audit.operation' ORDER BY position DESC LIMIT 1")
        assert refused == ("error", "false"), "the refusal is audited"
        assert unfinished(url) == []

        admin(f'GRANT SELECT, INSERT, DELETE ON "{schema}".{INDEX} TO "{role}"')
        killed = run_gormes(worker, "ops", "call", "notes.write", '{"text": "worker", "crash": true}',
                            "--import", str(notes))
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert note.read_text() == "worker"
        assert unfinished(url) == [("notes.write", "started")], "indexed, so the owner sees it"
        assert run_gormes(url, "audit", "verify").returncode == 0


def test_an_import_by_such_a_role_of_write_ahead_calls_is_refused(schema: str, tmp_path: Path):
    url = url_for_schema(schema)
    notes, _ = notes_file(tmp_path)
    source = tmp_path / "source.db"
    assert run_gormes(source, "ops", "call", "notes.write", '{"text": "a", "crash": true}',
                      "--import", str(notes)).returncode == -signal.SIGKILL
    export = tmp_path / "calls.jsonl"
    assert run_gormes(source, "export", "--out", str(export)).returncode == 0
    assert run_gormes(url, "ops", "call", "notes.write", '{"text": "b"}', "--import", str(notes)).returncode == 0
    with login_role(*worker_grants(schema), prefix="gormes_worker") as role:
        admin(f'REVOKE ALL ON "{schema}".{INDEX} FROM {role}')
        refused = run_gormes(as_role(url, role), "import", "--ignore-versions", str(export))
        assert "may not keep the open calls' index" in assert_one_line_error(refused)
        assert started_records(schema) == 1, "the owner's call alone: nothing imported"
        [audited] = admin(f"SELECT data::jsonb->>'operation', data::jsonb->>'outcome' FROM \"{schema}\".events"
                          " ORDER BY position DESC LIMIT 1")
        assert audited == ("events.import", "error"), "the refusal is audited"
