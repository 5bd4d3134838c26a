"""`gormes migrate` and the log commands on PostgreSQL, through the real CLI.

Each test gets a fresh schema on the real server (see tests/pg_helpers.py),
named in the URL, as a user would give it.
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import (
    REPO,
    assert_one_line_error,
    cli_env,
    digest,
    gormes_command,
    json_lines,
    run_gormes,
    write_notes,
)
from pg_helpers import PG_URL, admin, fresh_schema, url_for_schema

from gormes.actors.runs.approval_book import decide_in, read_approvals
from gormes.events.approvals import APPROVALS_STREAM, ApprovalRequested, fold_approvals
from gormes.events.notes import NoteAdded
from gormes.events.postgres import PostgresEventStore
from gormes.events.sqlite import SQLiteEventStore
from gormes.projections import approval_index
from gormes.projections.bookkeeping import has_table

NOTES = [(f"{kind}-{i % 7}", f"note {i}") for i, kind in
         zip(range(1, 1201), ["job", "run", "memory"] * 400, strict=True)]


@pytest.fixture
def target() -> Iterator[tuple[str, str]]:
    """(URL, schema) of an empty schema."""
    with fresh_schema() as schema:
        yield url_for_schema(schema), schema


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "gormes.db"
    write_notes(path, NOTES)
    return path


def migrate(source: Path | str, url: str, *extra: str):
    return run_gormes(source, "migrate", "--from", f"sqlite:{source}", "--to", url, *extra)


def hash_rows(rows) -> tuple[int, str]:
    """The documented hash, computed here independently of gormes."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(list(row), separators=(",", ":"), ensure_ascii=False).encode())
        h.update(b"\n")
    return len(rows), h.hexdigest()


COLUMNS = "position, stream, version, type, type_version, data"


def sqlite_rows(path: Path) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT {COLUMNS} FROM events ORDER BY position").fetchall()
    finally:
        conn.close()


def postgres_rows(schema: str) -> list[tuple]:
    return admin(f'SELECT {COLUMNS} FROM "{schema}".events ORDER BY position')


def test_migrate_copies_every_event_with_its_position_and_proves_it(source, target):
    url, schema = target
    before = digest(source)
    done = migrate(source, url, "--json", "--batch", "500")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    expected_count, expected_hash = hash_rows(sqlite_rows(source))
    assert report["verified"] is True
    assert (report["events"], report["copied"], report["already_present"]) == (1200, 1200, 0)
    assert (report["last_position"], report["sha256"]) == (1200, expected_hash)
    assert hash_rows(postgres_rows(schema)) == (expected_count, expected_hash)
    assert digest(source) == before  # the source is only read
    assert done.stderr == ""  # no progress bar when stderr is not a terminal


def test_the_log_commands_read_and_write_the_migrated_log(source, target):
    url, _ = target
    assert migrate(source, url).returncode == 0
    from_sqlite = run_gormes(source, "events", "--json", "--stream", "job-*", "--type", "note.*")
    from_postgres = run_gormes(url, "events", "--json", "--stream", "job-*", "--type", "note.*")
    assert from_postgres.returncode == 0, from_postgres.stderr
    assert from_postgres.stdout == from_sqlite.stdout and from_sqlite.stdout
    tail_pg = run_gormes(url, "tail", "--json", "--after", "1190")
    assert tail_pg.stdout == run_gormes(source, "tail", "--json", "--after", "1190").stdout
    version = sum(1 for stream, _ in NOTES if stream == "job-0")
    appended = run_gormes(url, "append", "job-0", "note.added", "--data", '{"text": "after"}',
                          "--expected-version", str(version), "--json")
    assert appended.returncode == 0, appended.stderr
    [line] = json_lines(appended.stdout)
    assert (line["position"], line["stream"], line["version"]) == (1201, "job-0", version + 1)
    assert line["data"]["text"] == "after"
    conflict = run_gormes(url, "append", "job-0", "note.added", "--data", '{"text": "x"}',
                          "--expected-version", str(version))
    line = assert_one_line_error(conflict)
    assert f"is at version {version + 1}, expected {version}" in line


def test_migrate_continues_after_an_exact_prefix_and_refuses_anything_else(source, target, tmp_path):
    url, schema = target
    half = tmp_path / "half.db"
    write_notes(half, NOTES[:500])
    assert migrate(half, url).returncode == 0
    # the full log starts with the same 500 events (same streams, texts, positions)
    # but was written at other times: recorded_at is not part of the proof
    again = migrate(source, url, "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert (report["copied"], report["already_present"], report["events"]) == (700, 500, 1200)
    assert hash_rows(postgres_rows(schema)) == hash_rows(sqlite_rows(source))
    rerun = migrate(source, url)
    assert rerun.returncode == 0 and "nothing to copy" in rerun.stdout

    other = tmp_path / "other.db"
    write_notes(other, [("job-1", "something else")] * 3)
    before = hash_rows(postgres_rows(schema))
    refused = migrate(other, url)
    assert "not an exact prefix" in assert_one_line_error(refused)
    assert hash_rows(postgres_rows(schema)) == before


def test_migrate_refuses_a_schema_of_another_application(source, target):
    url, schema = target
    admin(f'CREATE TABLE "{schema}".invoices(id integer)')
    refused = migrate(source, url)
    assert "another application" in assert_one_line_error(refused)
    tables = admin(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
    )
    assert tables == [("invoices",)]


def test_migrate_bad_input_is_one_clear_line(source, tmp_path):
    unreachable = migrate(source, "postgresql://gormes:secret@127.0.0.1:1/gormes")
    line = assert_one_line_error(unreachable)
    assert "cannot connect to PostgreSQL" in line and "secret" not in line
    not_a_url = migrate(source, str(tmp_path / "copy.db"))
    assert "--to must be a postgresql:// URL" in assert_one_line_error(not_a_url)
    missing = migrate(tmp_path / "missing.db", "postgresql://127.0.0.1:1/x")
    assert "no gormes database" in assert_one_line_error(missing)


def test_migrate_shows_a_progress_bar_on_a_terminal(source, target):
    url, _ = target
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            gormes_command(source, "migrate", "--from", f"sqlite:{source}", "--to", url,
                           "--batch", "300"),
            check=False, stdout=subprocess.PIPE, stderr=terminal, text=True, env=cli_env(), cwd=REPO,
            timeout=60,
        )
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
    assert done.returncode == 0
    assert b"copying events" in shown and b"100%" in shown
    assert "verified: 1200 events" in done.stdout


def _request(approval_id: str) -> ApprovalRequested:
    return ApprovalRequested(approval_id=approval_id, operation="shell.run", arguments="{}", args_hash="h",
                             caller="mcp:client", trust="gateway", why="rule", at=1)


async def test_the_migrated_log_answers_approval_reads_through_an_index_built_there(tmp_path, target):
    """The approvals index is not copied: the target's is built from its own
    events at the end of the copy, so it holds what a build there holds, the
    events the source had not indexed yet too, and reads on the target (even
    read-only) go through it and agree with the whole stream's fold."""
    url, schema = target
    source = tmp_path / "approvals.db"
    async with SQLiteEventStore.open(source) as store:
        for i in range(6):
            await store.append(f"notes-{i}", [NoteAdded(text=f"note {i}")])
            await store.append(APPROVALS_STREAM, [_request(f"a{i}")])
        await store.transact(lambda tx: decide_in(tx, 2, "a1", "approved", by="operator:cli"))
        await store.transact(lambda tx: decide_in(tx, 2, "a2", "denied", by="operator:cli"))
        await store.append(APPROVALS_STREAM, [_request("late")])  # after the source's last indexing
    done = migrate(source, url)
    assert done.returncode == 0, done.stderr

    async with PostgresEventStore.open(PG_URL, schema=schema, readonly=True) as store:
        records = await store.read_stream(APPROVALS_STREAM)
        oracle = fold_approvals([(r.position, r.event) for r in records])
        expected = [(r.position, r.event.approval_id,
                     oracle[r.event.approval_id].status if isinstance(r.event, ApprovalRequested) else None)
                    for r in records]

        def index(conn: Any) -> tuple[bool, list[tuple]]:
            rows = conn.execute("SELECT position, approval_id, status FROM approval_index ORDER BY position")
            return approval_index.lags(conn), [tuple(row) for row in rows.fetchall()]

        assert await store.read_sql(lambda conn: has_table(conn, approval_index.TABLE))
        assert await store.read_sql(index) == (False, expected)
        for status in ("pending", "approved", "denied", "all"):
            assert await read_approvals(store, status=status) == {
                i: a for i, a in oracle.items() if status in ("all", a.status)}
