"""The `streams` projection: one row per stream, deterministic from the log.

Every test runs on SQLite and on PostgreSQL (the `store` fixture, conftest.py,
whose clock gives each write a distinct time from 1000.0 on).
"""

from __future__ import annotations

import pytest
from projection_helpers import rows

from gormes.events.base import UnknownEvent
from gormes.events.notes import NoteAdded
from gormes.projections.runner import ProjectionRunner
from gormes.projections.streams import streams

COLUMNS = "stream, first_type, version, first_position, last_position, updated_at"


def note(text: str) -> NoteAdded:
    return NoteAdded(text=text)


def other(kind: str) -> UnknownEvent:
    # A type no event class declares: stored and projected like any other.
    return UnknownEvent(type=kind, data={"n": 1})


async def table(store) -> list[tuple]:
    return await rows(store, f"SELECT {COLUMNS} FROM streams ORDER BY stream")


async def expected_from_log(store) -> list[tuple]:
    """The rows, computed another way: from each stream's own events."""
    names = sorted({r.stream for r in await store.read_all()})
    rows = []
    for name in names:
        events = await store.read_stream(name)
        first, last = events[0], events[-1]
        rows.append(
            (name, first.type, last.version, first.position, last.position, last.recorded_at)
        )
    return rows


async def fill(store) -> None:
    await store.append("job-1", [other("job.submitted"), note("a")], expected_version=0)
    await store.append("run-1", [note("b")], expected_version=0)
    await store.append("job-1", [other("job.claimed")], expected_version=2)
    await store.append("memory-x", [other("memory.added"), other("memory.added")])
    await store.append("run-1", [note("c"), note("d")], expected_version=1)


@pytest.mark.parametrize("batch_size", [1, 2, 3, 1000])
async def test_one_row_per_stream_whatever_the_batch_size(store, batch_size):
    await fill(store)
    await ProjectionRunner(store, streams, batch_size=batch_size).catch_up()
    assert await table(store) == [
        ("job-1", "job.submitted", 3, 1, 4, 1002.0),
        ("memory-x", "memory.added", 2, 5, 6, 1003.0),
        ("run-1", "note.added", 3, 3, 8, 1004.0),
    ]
    assert await table(store) == await expected_from_log(store)


async def test_rows_follow_later_events_and_keep_the_first(store):
    await fill(store)
    runner = ProjectionRunner(store, streams)
    await runner.catch_up()
    await store.append("job-1", [note("later")], expected_version=3)
    await store.append("new", [other("x.y")], expected_version=0)
    await runner.catch_up()
    rows = {row[0]: row for row in await table(store)}
    [later] = await store.read_stream("job-1", after_version=3)
    [new] = await store.read_stream("new")
    assert rows["job-1"] == ("job-1", "job.submitted", 4, 1, 9, later.recorded_at)
    assert rows["new"] == ("new", "x.y", 1, 10, 10, new.recorded_at)
    assert await table(store) == await expected_from_log(store)


async def test_setup_is_idempotent_and_indexes_updated_at(store, backend):
    await fill(store)
    await ProjectionRunner(store, streams).catch_up()
    await ProjectionRunner(store, streams).prepare()  # setup again over existing tables
    if backend == "postgres":
        sql = "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'streams'"
    else:
        sql = "SELECT name FROM pragma_index_list('streams')"
    indexes = [name for (name,) in await rows(store, sql)]
    assert "idx_streams_updated_at" in indexes
    assert len(await table(store)) == 3
