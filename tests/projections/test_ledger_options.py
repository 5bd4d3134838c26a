"""The ledger's `jobs.options` holds only the options that differ from their
defaults (ledger version 6, decision 0051): every reader still gets the job's
options whole, SQL reads an option left out as NULL (its default through
`coalesce`), and a version-5 ledger, which held every option, is migrated to
exactly its rebuild on SQLite and on PostgreSQL."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import msgspec
import pytest

from gormes.actors.jobs.queue import JobQueue
from gormes.events.jobs import Backoff, JobOptions
from gormes.events.sqlite import SQLiteEventStore
from gormes.projections import ledger
from gormes.projections.ledger import options_json

# JobOptions' defaults as this ledger version leaves them out of its rows. A
# default that changes would change what every stored `{}` means: the ledger must
# then be folded again (a new ledger.VERSION), and this pin moves with it.
DEFAULTS_OF_VERSION_6 = {
    "queue": "default", "priority": 0, "delay_ms": 0, "max_attempts": 3,
    "backoff": {"kind": "exponential", "delay_ms": 1000, "jitter": 0.2},
    "timeout_ms": None, "max_stalled": 5, "parent_id": None, "on_child_fail": "fail_parent",
    "max_children": None, "idempotency_key": None, "max_waiting": None,
    "remove_on_complete": False, "remove_on_fail": False, "concurrency_key": None,
    "concurrency_limit": None, "debounce_key": None, "debounce_ms": None,
    "debounce_mode": "last", "debounce_max_ms": None,
}

OPTIONS = [
    JobOptions(),
    JobOptions(queue="emails", priority=-3, timeout_ms=5_000),
    JobOptions(backoff=Backoff(kind="fixed", delay_ms=250, jitter=0.0), max_attempts=1),
    JobOptions(remove_on_complete=True, remove_on_fail=True, max_stalled=0),
    JobOptions(concurrency_key="tenant-7", concurrency_limit=2, idempotency_key="k-1"),
    JobOptions(debounce_key="d", debounce_ms=300_000, debounce_mode="merge", debounce_max_ms=3_600_000),
]


def test_a_default_of_job_options_is_not_changed_without_a_new_ledger_version() -> None:
    assert msgspec.to_builtins(JobOptions()) == DEFAULTS_OF_VERSION_6, (
        "a JobOptions default changed: the ledger's rows leave defaults out, so bump"
        " ledger.VERSION (see its comment) and this pin"
    )
    assert ledger.VERSION == 6


@pytest.mark.parametrize("options", OPTIONS)
def test_the_column_holds_the_options_that_differ_and_gives_them_back_whole(options: JobOptions) -> None:
    text = options_json(options)
    held = msgspec.json.decode(text)
    assert held == {k: v for k, v in msgspec.to_builtins(options).items() if DEFAULTS_OF_VERSION_6[k] != v}
    assert msgspec.json.decode(text, type=JobOptions) == options


async def test_readers_get_every_option_and_sql_reads_a_default_as_null(tmp_path) -> None:
    db = tmp_path / "g.db"
    async with SQLiteEventStore.open(db) as store:
        queue = await JobQueue.open(store)
        plain = await queue.submit("work")
        chosen = await queue.submit("work", None, {"queue": "emails", "timeout_ms": 5_000})
        removed = await queue.submit("work", None, {"remove_on_complete": True})
        assert (await queue.get(plain.id)).options == JobOptions()
        assert (await queue.get(chosen.id)).options == JobOptions(queue="emails", timeout_ms=5_000)
        for _ in range(3):
            job = await queue.claim({"work"})
            await queue.complete(job.id, job.lock_token, None)
        assert await queue.get(removed.id) is None  # remove_on_complete read from the row
        assert (await queue.get(plain.id)).status == "completed"  # and its default: kept
    with sqlite3.connect(db) as conn:
        rows = dict(conn.execute("SELECT id, options FROM jobs"))
        assert rows == {plain.id: "{}", chosen.id: '{"queue":"emails","timeout_ms":5000}'}
        assert conn.execute(
            "SELECT coalesce(json_extract(options, '$.remove_on_complete'), 0) FROM jobs WHERE id = ?", (plain.id,)
        ).fetchone() == (0,)


def _full(options_text: str) -> str:
    """What a version-5 ledger held for these options: every one."""
    return msgspec.json.encode(msgspec.json.decode(options_text, type=JobOptions)).decode()


async def _submit_some(store) -> list[str]:
    queue = await JobQueue.open(store)
    ids = [(await queue.submit("work")).id]
    ids.append((await queue.submit("work", None, {"queue": "emails", "priority": 2})).id)
    job = await queue.claim({"work"})
    await queue.complete(job.id, job.lock_token, {"ok": True})
    return ids


async def test_a_version_5_ledger_is_migrated_to_its_rebuild(tmp_path) -> None:
    db = tmp_path / "g.db"
    async with SQLiteEventStore.open(db) as store:
        await _submit_some(store)
    with sqlite3.connect(db) as conn:
        compact = conn.execute("SELECT id, options FROM jobs ORDER BY id").fetchall()
        for job_id, text in compact:
            conn.execute("UPDATE jobs SET options = ? WHERE id = ?", (_full(text), job_id))
        conn.execute("UPDATE projection_versions SET version = 5 WHERE projection = ?", (ledger.NAME,))
        assert conn.execute("SELECT options FROM jobs").fetchall() != [(t,) for _, t in compact]
    async with SQLiteEventStore.open(db) as store:
        await JobQueue.open(store)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT id, options FROM jobs ORDER BY id").fetchall() == compact
        assert conn.execute(
            "SELECT version FROM projection_versions WHERE projection = ?", (ledger.NAME,)
        ).fetchone() == (6,)
    check = subprocess.run([sys.executable, "-m", "gormes", "--db", str(db), "projections", "rebuild", "--check"],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


def _options_rows(log) -> list[tuple[str, str]]:
    return [tuple(row) for row in log.sql.execute("SELECT id, options FROM jobs ORDER BY id").fetchall()]


async def test_a_version_5_ledger_on_postgresql_is_migrated_to_its_rebuild() -> None:
    from pg_helpers import PG_URL, admin, fresh_schema

    from gormes.events.postgres import PostgresEventStore

    with fresh_schema() as schema:
        async with PostgresEventStore.open(PG_URL, schema=schema, poll_interval=0.05) as store:
            await _submit_some(store)
            compact = await store.read_with(_options_rows)
        for job_id, text in compact:
            full = _full(text).replace("'", "''")
            admin(f"SET search_path TO \"{schema}\"; UPDATE jobs SET options = '{full}' WHERE id = '{job_id}'")
        admin(f"SET search_path TO \"{schema}\"; UPDATE projection_versions SET version = 5"
              f" WHERE projection = '{ledger.NAME}'")
        async with PostgresEventStore.open(PG_URL, schema=schema, poll_interval=0.05) as store:
            await JobQueue.open(store)
            assert await store.read_with(_options_rows) == compact
            await ledger.rebuild(store)
            assert await store.read_with(_options_rows) == compact
