"""A follower of some event types passes over the store's own commits of other
types without reading them (gormes/events/own_writes.py, decision 0050), and
still gets every event of its types: its own store's, and another writer's,
whenever that one commits.

The stores poll once an hour: a follower wakes on the writer's bump after an own
commit, or on the WAL watch hearing another connection's. Another writer here is
a second connection to the file (`SQLiteLog`), which the store cannot tell from
another process. The `fail_after` guards only keep a broken follower from
hanging the suite; nothing is timed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from gormes.events.base import Recorded
from gormes.events.jobs import JobPaused
from gormes.events.notes import NoteAdded
from gormes.events.own_writes import OwnCommit, OwnWrites, plain_names
from gormes.events.sqlite import SQLiteEventStore
from gormes.events.sqlite_log import SQLiteLog
from gormes.events.wal_watch import INotify

HOUR = 3600.0
NOTE, TAG = NoteAdded.__struct_config__.tag, JobPaused.__struct_config__.tag  # not followed, followed


def note(text: str) -> NoteAdded:
    return NoteAdded(text=text)


def tagged(tag: str) -> JobPaused:  # (`tag`: only to tell the calls apart when reading)
    return JobPaused(at=len(tag))


class Follower:
    """A subscription of `types` in a task, counting the pages it reads."""

    def __init__(self, store: SQLiteEventStore, types: tuple[str, ...]) -> None:
        self.store, self.types = store, types
        self.got: list[Recorded] = []
        self.pages = 0

    async def run(self, after: int) -> None:
        read_page = self.store.read_page

        async def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.pages += 1
            return await read_page(*args, **kwargs)

        self.store.read_page = counted  # type: ignore[method-assign]
        async for record in self.store.subscribe(after=after, types=self.types):
            self.got.append(record)

    async def until(self, n: int) -> None:
        with trio.fail_after(60):
            while len(self.got) < n:
                await trio.sleep(0.001)


@asynccontextmanager
async def following(store: SQLiteEventStore, types: tuple[str, ...]) -> AsyncIterator[Follower]:
    """A follower of `types` from the log's start for the time of the body; it has
    looked once and waits when the body starts."""
    follower = Follower(store, types)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(follower.run, 0)
        await trio.testing.wait_all_tasks_blocked()
        yield follower
        nursery.cancel_scope.cancel()


async def test_a_follower_reads_no_page_for_the_store_s_own_commits_of_other_types(tmp_path: Path) -> None:
    async with SQLiteEventStore.open(tmp_path / "o.db", poll_interval=HOUR) as store, \
            following(store, (TAG,)) as follower:
        assert follower.pages == 1  # the first look: nothing yet
        for i in range(30):
            await store.append(f"note-{i}", [note(str(i))])
            await trio.testing.wait_all_tasks_blocked()  # the follower woke, and waits again
        assert follower.pages == 1
        result = await store.append("note-x", [tagged("x")])
        await follower.until(1)
        assert [r.position for r in follower.got] == [result.first_position]
        assert follower.pages == 2  # the commit held its type: read


async def test_a_commit_of_mixed_types_is_read_and_delivers_only_the_followed_ones(tmp_path: Path) -> None:
    async with SQLiteEventStore.open(tmp_path / "o.db", poll_interval=HOUR) as store, \
            following(store, (TAG,)) as follower:
        result = await store.append("note-1", [note("a"), tagged("b"), note("c")])
        await follower.until(1)
        assert [r.position for r in follower.got] == [result.first_position + 1]


@pytest.mark.skipif(INotify is None, reason="the WAL watch is Linux only (with polling off)")
async def test_another_writer_s_events_between_our_own_commits_are_delivered(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    async with SQLiteEventStore.open(db, poll_interval=HOUR) as store:
        other = SQLiteLog(db)
        try:
            async with following(store, (TAG,)) as follower:
                expected = []
                for i in range(5):
                    await store.append(f"mine-{i}", [note(str(i))])
                    theirs = await trio.to_thread.run_sync(other.append_now, f"theirs-{i}", [tagged(str(i))])
                    expected.append(theirs.first_position)
                    await store.append(f"mine-{i}", [note(str(i))])
                    await follower.until(i + 1)
                assert [r.position for r in follower.got] == expected
        finally:
            other.close()


async def test_a_commit_landing_before_our_commit_s_head_is_read_is_delivered(tmp_path: Path, monkeypatch) -> None:
    # The race the head read is for: another writer commits after our COMMIT and
    # before the store takes in `data_version`, so no bump of the watch's will
    # follow for it. The head read after `data_version` is past our commit: the
    # follower must read, not wait.
    db = tmp_path / "o.db"
    async with SQLiteEventStore.open(db, poll_interval=HOUR) as store:
        other = SQLiteLog(db)
        changes = store._changes
        committed_here = changes.committed_here
        theirs: list[int] = []

        def another_commit_first() -> None:
            if changes.written is not None and not theirs:  # our commit is in: theirs now
                theirs.append(other.append_now("theirs", [tagged("between")]).first_position)
            committed_here()

        monkeypatch.setattr(changes, "committed_here", another_commit_first)
        try:
            async with following(store, (TAG,)) as follower:
                mine = await store.append("mine", [note("first")])
                await follower.until(1)
                assert [r.position for r in follower.got] == theirs == [mine.last_position + 1]
        finally:
            other.close()


async def test_a_follower_of_a_glob_pattern_reads_as_before(tmp_path: Path) -> None:
    async with SQLiteEventStore.open(tmp_path / "o.db", poll_interval=HOUR) as store, \
            following(store, ("note.*",)) as follower:
        positions = []
        for i in range(3):
            positions.append((await store.append(f"note-{i}", [note(str(i))])).first_position)
            await trio.testing.wait_all_tasks_blocked()
        await follower.until(3)
        assert [r.position for r in follower.got] == positions
        assert follower.pages >= 4  # no pattern is matched without SQL


# -- OwnWrites alone ---------------------------------------------------------------


def test_a_follower_moves_past_a_chain_of_own_commits_and_stops_at_one_of_its_types() -> None:
    own = OwnWrites()
    own.committed(OwnCommit(1, 3, frozenset({NOTE})), 1, 3)
    own.committed(OwnCommit(4, 9, frozenset({NOTE, "job.claimed"})), 2, 9)
    own.committed(OwnCommit(10, 10, frozenset({TAG})), 3, 10)
    names = frozenset({TAG})
    assert own.past(0, names) == 9  # then position 10 is of its type
    assert own.past(2, names) == 2  # inside a commit: it reads
    assert own.past(9, frozenset({"job.cancelled"})) == 10
    # Only the latest commit's bump says where the head is, and only until the next bump.
    assert own.quiet_head(3) == 10 and own.quiet_head(2) is None and own.quiet_head(4) is None


def test_a_commit_that_wrote_nothing_or_failed_says_nothing_of_the_head() -> None:
    own = OwnWrites()
    own.committed(OwnCommit(1, 2, frozenset({NOTE})), 1, 2)
    own.committed(None, 2, None)
    assert own.quiet_head(2) is None
    assert own.past(0, frozenset({TAG})) == 2  # what is known of earlier commits holds


def test_only_the_last_commits_are_kept() -> None:
    own = OwnWrites()
    for i in range(OwnWrites.KEEP + 1):
        own.committed(OwnCommit(i + 1, i + 1, frozenset({NOTE})), i + 1, i + 1)
    assert own.past(0, frozenset({TAG})) == 0  # the first was let go
    assert own.past(1, frozenset({TAG})) == OwnWrites.KEEP + 1


def test_only_plain_names_are_matched_without_sql() -> None:
    assert plain_names((TAG, NOTE)) == frozenset({TAG, NOTE})
    assert plain_names(None) is None and plain_names(()) is None
    assert plain_names(("note.*",)) is None and plain_names((TAG, "job.[ab]*")) is None
