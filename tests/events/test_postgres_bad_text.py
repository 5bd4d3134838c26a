"""Text PostgreSQL cannot hold (U+0000 in a stream name) fails the write that
carries it, with one line that says why, and only that write. psycopg refused
such a parameter before sending it and closed the connection, which the writer
once took for a lost server and retried forever; the store now refuses the name
itself before any SQL, on every backend (decision 0078's addendum). (A ledger
column's NUL, from a log written on SQLite, is written as U+FFFD: decision 0078.)"""

from __future__ import annotations

import pytest
import trio
from pg_helpers import fresh_schema, url_for_schema

from gormes.actors.jobs.queue import JobQueue
from gormes.errors import StoreError
from gormes.events.notes import NoteAdded
from gormes.events.postgres import PostgresEventStore


async def test_a_nul_in_a_write_fails_that_write_alone_and_the_store_goes_on():
    with fresh_schema() as schema:
        async with PostgresEventStore.open(url_for_schema(schema), reconnect_timeout=5) as store:
            queue = await JobQueue.open(store)
            outcomes: dict[str, object] = {}

            async def write(name: str, work) -> None:
                try:
                    outcomes[name] = await work()
                except StoreError as exc:
                    outcomes[name] = exc

            async with trio.open_nursery() as nursery:  # queued together: one writer batch
                for i in range(5):
                    nursery.start_soon(write, f"note-{i}", lambda i=i: store.append(f"notes-{i}", [NoteAdded(text="x")]))
                nursery.start_soon(write, "bad-stream", lambda: store.append("notes-\x00", [NoteAdded(text="y")]))
                nursery.start_soon(write, "bad-stream-2", lambda: store.append("notes-\x00-2", [NoteAdded(text="y")]))
                nursery.start_soon(write, "nul-queue", lambda: queue.submit("echo", {"n": "\x00"}, {"queue": "q\x00"}))
                nursery.start_soon(write, "job", lambda: queue.submit("echo", {"n": "\x00 in JSON is fine"}))

            for name in ("bad-stream", "bad-stream-2"):
                assert isinstance(outcomes[name], StoreError), outcomes[name]
                assert str(outcomes[name]).endswith("(PostgreSQL cannot store one); nothing was written")
            for i in range(5):
                assert not isinstance(outcomes[f"note-{i}"], BaseException)
                assert [r.event.text for r in await store.read_stream(f"notes-{i}")] == ["x"]  # once
            job = await queue.get(outcomes["job"].id)
            assert job is not None and job.data == {"n": "\x00 in JSON is fine"}
            queued = await queue.get(outcomes["nul-queue"].id)
            assert queued is not None and queued.queue == "q\ufffd"
            [submitted] = await store.read_stream(f"job-{queued.id}")
            assert submitted.event.options.queue == "q\x00", "the event keeps it"
            positions = [r.position for r in await store.read_all()]
            assert positions == list(range(1, len(positions) + 1))  # nothing half-written
            after = await store.append("notes-after", [NoteAdded(text="z")])
            assert after.first_position == positions[-1] + 1


@pytest.mark.parametrize("text", ["a\x00b", "\x00"])
async def test_a_nul_in_an_append_alone_is_one_error(text: str):
    with fresh_schema() as schema:
        async with PostgresEventStore.open(url_for_schema(schema), reconnect_timeout=5) as store:
            with pytest.raises(StoreError, match="cannot contain NUL"):
                await store.append(text, [NoteAdded(text="y")])
            assert await store.head() == 0
