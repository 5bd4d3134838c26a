"""A log written before decision 0074, holding U+0000 (NUL) in a projection's text,
moves to PostgreSQL and works there (decision 0078).

Before 0074, a gateway's `job.submit` named `"ec\\u0000ho"` (or with NUL in a key),
its `memory.remember` of such a fact, entity or relation, and any remember by a
client whose name held NUL were recorded on SQLite. 0074 refuses them now, but an
old log still holds them: `gormes migrate` copied it to PostgreSQL (exit 0), then
`gormes jobs list` and `gormes projections rebuild` failed there ("PostgreSQL text
fields cannot contain NUL (0x00) bytes"), and so did `gormes import` of its export.
On PostgreSQL a projection's text column now holds U+FFFD where the event's string
holds NUL; the events are copied as they were (their JSON escapes it).

The same was true of gormes now, on PostgreSQL itself: a job whose handler failed
with NUL in its error (an exception quoting a file's bytes) could not be recorded
failed; the ledger's `error` column refused it, the transaction with it.

The old log is written as an old gormes wrote it: by the library below the
executor (the queue, memory's writer), which appends the events as given.

NUL in a stream name is the one thing PostgreSQL cannot hold at all (the name is
the event's own row, not a projection's). Only an import on SQLite (or a Python
caller of the store) wrote one; it is refused now, on every backend, and `gormes migrate` refuses a log holding one
up front, naming the event, with nothing copied (it failed mid-copy, exit 1).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import trio
from cli_helpers import assert_one_line_error, run_gormes
from pg_helpers import admin, backend_store, fresh_schema, url_for_schema

from gormes.actors.jobs.queue import JobQueue
from gormes.errors import UnstorableStream
from gormes.events.jobs import JobFailed
from gormes.events.memory import Origin
from gormes.events.notes import NoteAdded
from gormes.events.sqlite import SQLiteEventStore
from gormes.events.store import AppendRequest
from gormes.memory.writer import MemoryWriter, Source

SCOPE = "chat:old"


async def _write_old_log(db: Path) -> None:
    async with SQLiteEventStore.open(db) as store:
        queue = await JobQueue.open(store)
        await queue.submit("ec\x00ho", {"text": "a\x00b"})
        await queue.submit("echo", {"n": 1}, {"idempotency_key": "i\x00"})
        await queue.submit("echo", {"n": 2}, {"debounce_key": "d\x00", "debounce_ms": 10})
        await queue.submit("echo", {"n": 3}, {"concurrency_key": "c\x00", "concurrency_limit": 1})
        writer = MemoryWriter(store)
        source = Source(origin=Origin(artifact="caller:mcp:bad\x00client"))
        await writer.add_fact(SCOPE, "a \x00 fact", source, subject="s\x00 entity")
        await writer.relate(SCOPE, "s\x00 entity", "p\x00", "o", source)


def ok(db: str | Path, *args: str) -> str:
    done = run_gormes(db, *args, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _works_on_postgresql(url: str) -> None:
    """The job queue, a rebuild and memory's reads, with U+FFFD for NUL in text."""
    listed = json.loads(ok(url, "jobs", "list", "--json"))
    jobs = {job["data"].get("n", job["name"]): job for job in listed}
    assert jobs["ec\ufffdho"]["data"] == {"text": "a\x00b"}, "free JSON keeps its NUL"
    assert jobs[1]["idempotency_key"] == "i\ufffd"
    assert jobs[2]["debounce_key"] == "d\ufffd"
    assert jobs[3]["concurrency_key"] == "c\ufffd"
    rebuilt = ok(url, "projections", "rebuild")
    assert "ledger: rebuilt" in rebuilt and "memory: rebuilt" in rebuilt, rebuilt
    assert json.loads(ok(url, "jobs", "list", "--json")) == listed, "rebuilt as it was folded inline"
    recalled = json.loads(ok(url, "recall", "fact", "--scope", SCOPE, "--json"))
    [hit] = [h for h in recalled["hits"] if h["kind"] == "fact"]
    assert hit["text"] == "a \ufffd fact" and hit["origin"] == "artifact caller:mcp:bad\ufffdclient", hit


async def test_an_old_log_holding_nul_in_text_migrates_and_works_on_postgresql(db_path: Path):
    await _write_old_log(db_path)
    exported = ok(db_path, "export")
    with fresh_schema() as schema:
        url = url_for_schema(schema)
        moved = ok(db_path, "migrate", "--from", str(db_path), "--to", url)
        assert "verified" in moved, moved
        assert ok(url, "export") == exported, "the events are copied as they were, NUL and all"
        _works_on_postgresql(url)


async def test_its_export_imports_into_postgresql_and_works_there(db_path: Path, tmp_path: Path):
    await _write_old_log(db_path)
    export = tmp_path / "old.jsonl"
    ok(db_path, "export", "--out", str(export))
    assert "\\u0000" in export.read_text()
    with fresh_schema() as schema:
        url = url_for_schema(schema)
        ok(url, "import", "--live-work", str(export))
        _works_on_postgresql(url)


async def test_a_job_failing_with_nul_in_its_error_is_recorded_on_postgresql(db_path: Path):
    async with backend_store("postgres", db_path) as store:
        queue = await JobQueue.open(store)
        job = await queue.submit("echo", {}, {"max_attempts": 1})
        claimed = await queue.claim(["echo"], worker_id="w1")
        assert claimed is not None and claimed.lock_token is not None
        failed = await queue.fail(claimed.id, claimed.lock_token, "cannot parse b'\x00\x01'")
        assert failed is not None and (failed.status, failed.error) == ("dead", "cannot parse b'\ufffd\x01'")
        [event] = [r.event for r in await store.read_stream(f"job-{job.id}") if isinstance(r.event, JobFailed)]
        assert event.error == "cannot parse b'\x00\x01'", "the event keeps what the handler said"


async def _write_nul_stream_log(db: Path) -> None:
    """As an import on SQLite wrote one before decision 0078 (the store refuses such
    a name now): the third note's stream renamed in the file."""
    async with SQLiteEventStore.open(db) as store:
        for name in ("notes-1", "notes-2", "notes-x", "notes-3"):
            await store.append(name, [NoteAdded(text=name)])
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE events SET stream = 'notes-' || char(0) WHERE stream = 'notes-x'")


async def test_a_log_with_nul_in_a_stream_name_is_refused_up_front_and_moves_without_it(
        db_path: Path, tmp_path: Path):
    await _write_nul_stream_log(db_path)
    with fresh_schema() as schema:
        url = url_for_schema(schema)
        line = assert_one_line_error(run_gormes(db_path, "migrate", "--from", str(db_path), "--to", url))
        assert "the stream name of the event at position 3 holds U+0000 (NUL)" in line, line
        assert "nothing was copied" in line and "gormes export --stream" in line, line
        assert run_gormes(db_path, "migrate", "--from", str(db_path), "--to", url).returncode == 2
        assert admin(f'SELECT count(*) FROM "{schema}".events') == [(0,)]
        # what the refusal says to do: export the other streams, and import that
        others = tmp_path / "others.jsonl"
        ok(db_path, "export", "--stream", "notes-[0-9]", "--out", str(others))
        ok(url, "import", str(others))
        assert admin(f"SELECT stream FROM \"{schema}\".events WHERE type = 'note.added' ORDER BY position") == [
            ("notes-1",), ("notes-2",), ("notes-3",)]


async def test_an_import_of_a_stream_name_holding_nul_is_refused_on_every_backend(
        db_path: Path, tmp_path: Path):
    await _write_nul_stream_log(db_path)
    export = tmp_path / "all.jsonl"
    ok(db_path, "export", "--out", str(export))
    with fresh_schema() as schema:
        for target in (tmp_path / "fresh.db", url_for_schema(schema)):
            refused = run_gormes(target, "import", str(export))
            assert refused.returncode == 2, refused
            line = assert_one_line_error(refused)
            assert line == "gormes: error: line 3: the stream name holds U+0000 (NUL), which PostgreSQL cannot store"
        assert admin(f"SELECT count(*) FROM \"{schema}\".events WHERE type = 'note.added'") == [(0,)]
    assert "note.added" not in ok(tmp_path / "fresh.db", "events", "--json"), "nothing imported"


async def test_a_python_caller_of_the_store_cannot_write_a_nul_stream_name_on_sqlite_either(db_path: Path):
    """SQLite took it, and the log then could not move to PostgreSQL or be imported.
    Refused alone, by every way the store appends: a lone append, one of a batch,
    several streams at once, and a transaction's append (undone whole)."""
    async with SQLiteEventStore.open(db_path) as store:
        outcomes: dict[str, object] = {}

        async def write(name: str, work) -> None:
            try:
                outcomes[name] = await work()
            except UnstorableStream as exc:
                outcomes[name] = exc

        async with trio.open_nursery() as nursery:  # queued together: one writer batch
            nursery.start_soon(write, "ok", lambda: store.append("notes-1", [NoteAdded(text="x")]))
            nursery.start_soon(write, "lone", lambda: store.append("notes-\x00", [NoteAdded(text="y")]))
            nursery.start_soon(write, "two", lambda: store.append("n\x00", [NoteAdded(text="a"), NoteAdded(text="b")]))
        many = [AppendRequest("notes-2", [NoteAdded(text="z")]), AppendRequest("\x00", [NoteAdded(text="z")])]
        with pytest.raises(UnstorableStream):
            await store.append_many(many)

        def both(tx) -> None:
            tx.append("notes-3", [NoteAdded(text="w")])
            tx.append("notes-\x00-3", [NoteAdded(text="w")])
        with pytest.raises(UnstorableStream, match="a stream name cannot contain NUL"):
            await store.transact(both)
        for name in ("lone", "two"):
            assert isinstance(outcomes[name], UnstorableStream), outcomes[name]
        assert [(r.stream, r.event.text) for r in await store.read_all()] == [("notes-1", "x")]
        after = await store.append("notes-after", [NoteAdded(text="z")])
        assert after.first_position == 2
