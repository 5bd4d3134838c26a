"""The projection runner: exactly-once batches, catch-up, live follow, wait, rebuild.

Every test runs on SQLite and on PostgreSQL (the `store` fixture, conftest.py).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
import trio
from projection_helpers import rows, status_of

from gormes.errors import ProjectionError
from gormes.events.notes import NoteAdded
from gormes.projections.runner import ProjectionRunner
from gormes.projections.schema import Schema, Table
from gormes.projections.streams import streams

HANG_GUARD = 30  # seconds; only stops a broken test from hanging, never asserted on


class NoteCounter:
    """Counts notes per stream; raises on any note whose text is in `poison`."""

    name = "note_counts"
    tables = ("note_counts",)
    schema = Schema(
        tables=(Table("note_counts", {"stream": str, "notes": int, "last_text": str}, "stream"),)
    )

    def __init__(self, version: int = 1, weight: int = 1, poison: set[str] | None = None):
        self.version = version
        self.weight = weight
        self.poison = poison if poison is not None else set()

    def setup(self, db) -> None:
        self.schema.create_sqlite(db)

    def apply(self, conn, records) -> None:
        for r in records:
            if r.event.text in self.poison:
                raise ValueError(f"poisoned note at position {r.position}")
            conn.execute(
                "INSERT INTO note_counts(stream, notes, last_text) VALUES (?, ?, ?) "
                "ON CONFLICT(stream) DO UPDATE SET notes = note_counts.notes + excluded.notes, "
                "last_text = excluded.last_text",
                (r.stream, self.weight, r.event.text),
            )


def note(text: str) -> NoteAdded:
    return NoteAdded(text=text, author="test")


async def counts(store) -> dict[str, int]:
    return dict(await rows(store, "SELECT stream, notes FROM note_counts"))


async def tracked(store, name: str) -> int:
    found = await rows(store, "SELECT position FROM tracking WHERE projection = ?", (name,))
    return found[0][0] if found else 0


async def append_notes(store, texts_by_stream: list[tuple[str, str]]) -> None:
    for stream, text in texts_by_stream:
        await store.append(stream, [note(text)])


def truth(pairs: list[tuple[str, str]]) -> dict[str, int]:
    return dict(Counter(stream for stream, _ in pairs))


async def test_catch_up_applies_every_event_exactly_once(store):
    pairs = [(f"s-{i % 3}", f"n{i}") for i in range(25)]
    await append_notes(store, pairs)
    runner = ProjectionRunner(store, NoteCounter(), batch_size=4)
    assert await runner.catch_up() == 25
    assert await counts(store) == truth(pairs)
    assert await tracked(store, "note_counts") == 25
    # A second runner (a restarted process) resumes from tracking: nothing twice.
    again = ProjectionRunner(store, NoteCounter(), batch_size=4)
    assert await again.catch_up() == 25
    assert await counts(store) == truth(pairs)


async def test_failed_batch_leaves_tables_and_tracking_unmoved_then_resumes(store):
    pairs = [(f"s-{i % 2}", "poison" if i == 10 else f"n{i}") for i in range(20)]
    await append_notes(store, pairs)
    faulty = NoteCounter(poison={"poison"})
    runner = ProjectionRunner(store, faulty, batch_size=4)

    with pytest.raises(ProjectionError, match="events 9..12"):
        await runner.catch_up()
    # Batches 1-4 and 5-8 committed; 9-12 (holding the poison at 11) did not at all.
    assert await tracked(store, "note_counts") == 8
    assert runner.position == 8
    assert await counts(store) == truth(pairs[:8])
    status = await status_of(store, "note_counts", 1)
    assert (status.state, status.failures) == ("failing", 1)
    assert "poisoned note at position 11" in status.last_error

    # Failing again on the same batch does not double the failure record.
    with pytest.raises(ProjectionError):
        await runner.catch_up()
    assert await rows(store, "SELECT count(*) FROM projection_failures") == [(1,)]

    faulty.poison.clear()
    assert await runner.catch_up() == 20
    assert await counts(store) == truth(pairs)
    status = await status_of(store, "note_counts", 1)
    assert (status.state, status.failures, status.lag) == ("ok", 0, 0)


async def test_follows_live_appends_and_wait_gives_read_your_writes(store):
    runner = ProjectionRunner(store, NoteCounter(), batch_size=7)
    appended: list[tuple[str, str]] = []

    async def writer(w: int) -> None:
        for i in range(30):
            stream = f"w{w}-{i % 4}"
            result = await store.append(stream, [note(f"{w}.{i}")])
            appended.append((stream, f"{w}.{i}"))
            assert await runner.wait(result.last_position, timeout=HANG_GUARD)
            # Read-your-writes: this writer's own event is already in the table.
            [(n,)] = await rows(store, "SELECT notes FROM note_counts WHERE stream = ?", (stream,))
            assert n == result.version

    await append_notes(store, [("early", "before the runner started")])
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        async with trio.open_nursery() as writers:
            for w in range(5):
                writers.start_soon(writer, w)
        assert await runner.wait(await store.head(), timeout=HANG_GUARD)
        nursery.cancel_scope.cancel()
    assert await counts(store) == truth([("early", "x"), *appended])
    assert await tracked(store, "note_counts") == 151


async def test_wait_times_out_when_nothing_applies(store):
    await append_notes(store, [("a", "1")])
    runner = ProjectionRunner(store, NoteCounter())
    await runner.prepare()
    assert await runner.wait(1, timeout=0.01) is False
    await runner.catch_up()
    assert await runner.wait(1, timeout=0) is True


async def test_wait_raises_when_the_runner_stops_on_a_failed_batch(store):
    await append_notes(store, [("a", "1"), ("a", "poison"), ("a", "3")])
    runner = ProjectionRunner(store, NoteCounter(poison={"poison"}), batch_size=1)
    stopped: list[ProjectionError] = []

    async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            await runner.run(task_status=task_status)
        except ProjectionError as exc:
            stopped.append(exc)

    async with trio.open_nursery() as nursery:
        await nursery.start(run)
        with pytest.raises(ProjectionError, match="events 2..2"):
            await runner.wait(3, timeout=HANG_GUARD)
    assert len(stopped) == 1
    assert await tracked(store, "note_counts") == 1


async def test_two_runners_of_one_projection_never_apply_an_event_twice(store):
    pairs = [(f"s-{i % 5}", f"n{i}") for i in range(200)]
    await append_notes(store, pairs)
    first = ProjectionRunner(store, NoteCounter(), batch_size=3)
    second = ProjectionRunner(store, NoteCounter(), batch_size=5)
    await first.prepare()
    await second.prepare()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first.catch_up)
        nursery.start_soon(second.catch_up)
    assert await counts(store) == truth(pairs)
    assert await tracked(store, "note_counts") == 200


async def test_rebuild_while_live_gives_identical_tables(store):
    runner = ProjectionRunner(store, streams, batch_size=16)
    counter = ProjectionRunner(store, NoteCounter(), batch_size=9)
    rng = random.Random(7)

    async def writer(w: int) -> None:
        for i in range(40):
            stream = f"job-{rng.randrange(12)}"
            await store.append(stream, [note(f"{w}.{i}")] * rng.randint(1, 3))
            if i % 10 == 0:
                await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        await nursery.start(counter.run)
        async with trio.open_nursery() as writers:
            for w in range(4):
                writers.start_soon(writer, w)
        head = await store.head()
        assert await runner.wait(head, timeout=HANG_GUARD)
        assert await counter.wait(head, timeout=HANG_GUARD)
        nursery.cancel_scope.cancel()

    live_streams = await rows(store, "SELECT * FROM streams ORDER BY stream")
    live_counts = await rows(store, "SELECT * FROM note_counts ORDER BY stream")
    assert len(live_streams) == 12

    assert await ProjectionRunner(store, streams, batch_size=50).rebuild() == head
    assert await ProjectionRunner(store, NoteCounter(), batch_size=50).rebuild() == head
    assert await rows(store, "SELECT * FROM streams ORDER BY stream") == live_streams
    assert await rows(store, "SELECT * FROM note_counts ORDER BY stream") == live_counts


async def test_rebuild_up_to_a_position_stops_there(store):
    await append_notes(store, [(f"s-{i % 2}", f"n{i}") for i in range(10)])
    runner = ProjectionRunner(store, NoteCounter(), batch_size=4)
    assert await runner.rebuild(upto=6) == 6
    assert await counts(store) == {"s-0": 3, "s-1": 3}
    assert await tracked(store, "note_counts") == 6


async def test_version_change_rebuilds_from_zero(store):
    pairs = [(f"s-{i % 3}", f"n{i}") for i in range(12)]
    await append_notes(store, pairs)
    await ProjectionRunner(store, NoteCounter(version=1, weight=1)).catch_up()
    assert await counts(store) == truth(pairs)

    # Version 2 counts each note ten times: only a rebuild from 0 makes every row agree.
    v2 = ProjectionRunner(store, NoteCounter(version=2, weight=10), batch_size=5)
    await v2.prepare()
    assert v2.position == 0
    assert await rows(store, "SELECT count(*) FROM note_counts") == [(0,)]
    await v2.catch_up()
    assert await counts(store) == {stream: 10 * n for stream, n in truth(pairs).items()}
    assert await rows(store, "SELECT version FROM projection_versions WHERE projection = 'note_counts'") == [(2,)]

    # The same version again is not rebuilt: it resumes where it was.
    await append_notes(store, [("s-0", "late")])
    again = ProjectionRunner(store, NoteCounter(version=2, weight=10))
    await again.prepare()
    assert again.position == 12
    await again.catch_up()
    assert (await counts(store))["s-0"] == 10 * (truth(pairs)["s-0"] + 1)
