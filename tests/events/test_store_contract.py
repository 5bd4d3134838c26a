"""The EventStore contract on both backends: one `store` fixture, SQLite and Postgres.

The backend-neutral tests of test_store.py are imported and run here against the
parametrized fixture (defined in this module, so it overrides the SQLite-only one
of conftest.py). Tests that reached into the SQLite file directly are restated
here through a `Backend`, which knows how to open a second store on the same log
and speaks its SQL dialect. The Postgres side gets a fresh schema per test.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio
from pg_helpers import PG_URL, admin, fresh_schema
from test_store import (  # noqa: F401 - collected here, run on both backends
    all_positions_and_versions,
    note,
    test_any_expected_version_skips_the_check,
    test_append_assigns_versions_from_one_and_positions_in_order,
    test_a_cancelled_appender_leaves_its_batch_mates_and_the_writer_unharmed,
    test_append_many_is_atomic_across_streams,
    test_concurrent_appends_to_one_stream_conflict_and_lose_nothing,
    test_one_batch_of_mixed_requests_each_gets_what_it_asked_for,
    test_read_all_filters_by_type_and_glob,
    test_subscribe_neither_skips_nor_repeats_while_writers_run,
    test_subscribe_with_type_filter_moves_past_other_events,
    test_transact_reads_decides_and_appends_in_one_transaction,
    test_version_mismatch_raises_and_writes_nothing,
)

from gormes.errors import ConcurrencyError, StoreReadOnly
from gormes.events.open import open_store
from gormes.events.store import AppendRequest, EventStore


class Backend:
    """One log, as each backend keeps it: how to open stores on it, its SQL."""

    name: str
    scratch_table_sql: str
    scratch_exists_sql: str

    def open(self, **kwargs: Any) -> AbstractAsyncContextManager[Any]:
        raise NotImplementedError


class SQLiteBackend(Backend):
    name = "sqlite"
    scratch_table_sql = "CREATE TABLE scratch(a)"
    scratch_exists_sql = "SELECT name FROM sqlite_master WHERE name = 'scratch'"

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self, **kwargs: Any) -> AbstractAsyncContextManager[Any]:
        return open_store(self.path, **kwargs)


class PostgresBackend(Backend):
    name = "postgres"
    scratch_table_sql = "CREATE TABLE scratch(a integer)"
    scratch_exists_sql = (
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_name = 'scratch' AND table_schema = current_schema()"
    )

    def __init__(self, schema: str) -> None:
        self.schema = schema

    def open(self, **kwargs: Any) -> AbstractAsyncContextManager[Any]:
        return open_store(PG_URL, schema=self.schema, **kwargs)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        yield SQLiteBackend(tmp_path / "gormes.db")
    else:
        with fresh_schema() as schema:
            yield PostgresBackend(schema)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Any]:
    async with backend.open() as s:
        yield s


async def test_fifty_concurrent_appenders_give_gap_free_commit_order(store):
    acknowledged: list[tuple[str, int, int]] = []

    async def appender(i: int) -> None:
        version = 0
        for j in range(20):
            await trio.sleep(random.random() / 1000)
            result = await store.append(f"s{i % 10}-{i}", [note(f"{i}/{j}")], expected_version=version)
            version = result.version
            acknowledged.append((result.stream, result.version, result.last_position))

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(appender, i)

    positions, streams = await all_positions_and_versions(store)
    assert positions == list(range(1, 50 * 20 + 1))
    assert all(v == list(range(1, 21)) for v in streams.values())
    assert len(streams) == 50
    by_position = {r.position: (r.stream, r.version) for r in await store.read_all()}
    assert all(by_position[pos] == (s, v) for s, v, pos in acknowledged)
    assert store.batches_committed < 50 * 20  # group commit shared transactions


async def test_a_failing_transact_is_undone_alone(store, backend):
    def half_then_fail(tx):
        tx.append("x", [note("partial")], expected_version=0)
        tx.execute(backend.scratch_table_sql)
        raise RuntimeError("boom")

    async def fails() -> None:
        with pytest.raises(RuntimeError, match="boom"):
            await store.transact(half_then_fail)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fails)
        nursery.start_soon(store.append, "y", [note("kept")], 0)
    assert await store.read_stream("x") == []
    assert [r.event.text for r in await store.read_stream("y")] == ["kept"]
    rows = await store.transact(lambda tx: tx.execute(backend.scratch_exists_sql).fetchall())
    assert rows == []


async def test_a_rejected_append_leaves_no_gap_in_positions(store):
    await store.append("a", [note("1")], expected_version=0)
    with pytest.raises(ConcurrencyError):
        await store.append("a", [note("lost")], expected_version=0)

    def conflict_inside(tx):
        tx.append("b", [note("undone")], expected_version=0)
        tx.append("a", [note("lost")], expected_version=0)

    with pytest.raises(ConcurrencyError):
        await store.transact(conflict_inside)
    result = await store.append("c", [note("2")], expected_version=0)
    assert result.first_position == 2
    positions, _ = await all_positions_and_versions(store)
    assert positions == [1, 2]


async def test_subscribe_sees_appends_from_another_store_on_the_same_log(store, backend):
    seen: list[str] = []

    async def follow() -> None:
        async for record in store.subscribe(after=0):
            seen.append(record.event.text)
            if len(seen) == 3:
                return

    with trio.fail_after(30):  # a hang guard, not a timing assertion
        async with backend.open() as other, trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            for i in range(3):
                await other.append("elsewhere", [note(str(i))])
    assert seen == ["0", "1", "2"]


async def test_two_stores_writing_at_once_share_one_gap_free_order(store, backend):
    """Two writers on one log (two hosts, in the Postgres case) never interleave badly."""

    async def writer(s: Any, name: str) -> None:
        version = 0
        for j in range(60):
            result = await s.append(name, [note(f"{name}{j}"), note(f"{name}{j}'")], version)
            version = result.version

    async with backend.open() as other, trio.open_nursery() as nursery:
        for w in range(3):
            nursery.start_soon(writer, store, f"here{w}")
            nursery.start_soon(writer, other, f"there{w}")
    positions, streams = await all_positions_and_versions(store)
    assert positions == list(range(1, 6 * 120 + 1))
    assert all(v == list(range(1, 121)) for v in streams.values())


async def test_events_survive_reopening(backend):
    async with backend.open() as store:
        await store.append("a", [note("1"), note("2")], 0)
    async with backend.open() as store:
        assert [r.event for r in await store.read_stream("a")] == [note("1"), note("2")]
        await store.append("a", [note("3")], 2)
        assert await store.head() == 3


async def test_a_readonly_store_reads_but_refuses_writes(backend):
    async with backend.open() as store:
        await store.append("a", [note("1")])
    async with backend.open(readonly=True) as store:
        assert [r.event.text for r in await store.read_all()] == ["1"]
        with pytest.raises(StoreReadOnly):
            await store.append("a", [note("2")])


async def test_queued_appends_commit_before_the_store_closes(backend):
    results = []
    async with backend.open() as store:

        async def append(i: int) -> None:
            results.append(await store.append(f"q{i}", [note(str(i))], 0))

        async with trio.open_nursery() as nursery:
            for i in range(30):
                nursery.start_soon(append, i)
    async with backend.open() as store:
        assert await store.head() == 30
    assert sorted(r.last_position for r in results) == list(range(1, 31))


async def test_closing_while_a_commit_runs_still_commits_what_queued_behind_it(backend):
    # Regression (both writers): the close's wake-up was used up by the batch that
    # queued during the commit, and the writer then waited for good.
    import threading

    import trio.testing

    started, release = threading.Event(), threading.Event()

    def hold(tx: Any) -> str:
        started.set()
        release.wait()
        return "held"

    outcomes: list[object] = []

    async def call(fn: Any, *args: Any) -> None:
        outcomes.append(await fn(*args))

    with trio.fail_after(60):
        async with trio.open_nursery() as outer:
            async with backend.open() as store:
                outer.start_soon(call, store.transact, hold)
                await trio.to_thread.run_sync(started.wait)  # the writer is in its thread
                outer.start_soon(call, store.append, "late", [note("queued")], 0)
                await trio.testing.wait_all_tasks_blocked()  # ... and that append queued
                await store.aclose()
                release.set()
    assert "held" in outcomes and len(outcomes) == 2
    async with backend.open() as store:
        assert [r.event.text for r in await store.read_stream("late")] == ["queued"]


# -- what callers use beyond appending and reading (the protocol's other members) --


async def test_a_store_is_an_event_store_that_names_its_dialect(backend):
    async with backend.open() as store:
        assert isinstance(store, EventStore)
        assert (store.dialect, store.readonly) == (backend.name, False)
    async with backend.open(readonly=True) as store:
        assert isinstance(store, EventStore)
        assert (store.dialect, store.readonly) == (backend.name, True)


async def test_stream_version_counts_a_stream_s_events(store):
    assert await store.stream_version("a") == 0
    await store.append("a", [note("1"), note("2")], 0)
    await store.append("b", [note("3")], 0)
    assert (await store.stream_version("a"), await store.stream_version("b")) == (2, 1)


async def test_read_page_says_how_far_it_scanned_and_where_the_head_is(store):
    for i in range(3):
        await store.append("a", [note(str(i))])
    records, scanned, head = await store.read_page(0, 2)
    assert ([r.position for r in records], scanned, head) == ([1, 2], 2, 3)
    # a filter that matches nothing still moves a follower past what it scanned
    assert await store.read_page(1, 10, types=["no.such.*"]) == ([], 3, 3)
    assert await store.read_page(3, 10) == ([], 3, 3)


async def test_read_with_hands_a_log_with_the_same_reads_on_both(store):
    await store.append("run-a", [note("1"), note("2")], 0)
    await store.append("job-1", [note("3")], 0)
    await store.append("run-b", [note("4")], 0)

    def read(log: Any) -> dict[str, Any]:
        return {
            "dialect": log.dialect,
            "head": log.head(),
            "count": log.count(),
            "version": log.stream_version("run-a"),
            "stream": [r.event.text for r in log.read_stream("run-a", after_version=1)],
            "streams": {s: [r.version for r in rs] for s, rs in log.read_streams(["run-b", "run-a", "none"]).items()},
            "runs": [r.position for r in log.read_all(streams=["run-*"])],
            "upto": [r.position for r in log.read_all(1, streams=["run-*", "job-1"], upto=3)],
            "rows": [row[:5] for row in log.select_rows(2, 1)],
            "page": [r.position for r in log.read_page(0, 10, types=["note.added"])[0]],
            "sql": log.sql.execute("SELECT count(*) FROM events WHERE stream = ?", ("run-a",)).fetchone()[0],
        }

    assert await store.read_with(read) == {
        "dialect": store.dialect, "head": 4, "count": 4, "version": 2, "stream": ["2"],
        "streams": {"run-b": [1], "run-a": [1, 2], "none": []},
        "runs": [1, 2, 4], "upto": [2, 3], "rows": [(3, "job-1", 1, "note.added", 1)],
        "page": [1, 2, 3, 4], "sql": 2,
    }


async def test_read_sql_runs_question_mark_sql_on_either_database(store):
    await store.append("a", [note("1"), note("2")], 0)
    await store.append("b", [note("3")], 0)
    rows = await store.read_sql(lambda conn: conn.execute(
        "SELECT stream, version FROM events WHERE stream = ? AND version >= ? ORDER BY version",
        ("a", 1)).fetchall())
    assert [tuple(r) for r in rows] == [("a", 1), ("a", 2)]


async def test_the_generation_moves_for_writes_of_this_store_and_of_another(store, backend):
    with trio.fail_after(30):  # a hang guard, not a timing assertion
        seen = store.generation
        await store.append("a", [note("1")])
        await store.wait_for_change(seen)
        assert store.generation != seen

        async with backend.open() as other:
            seen = store.generation
            waited = trio.Event()

            async def wait() -> None:
                await store.wait_for_change(seen)
                waited.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await other.append("b", [note("2")])
                await waited.wait()
    assert await store.head() == 2


async def test_an_inline_apply_runs_in_each_write_transaction_once_however_often_added(store, backend):
    await store.transact(lambda tx: tx.execute(backend.scratch_table_sql))
    applied: list[list[tuple[int, str]]] = []

    def apply(conn: Any, records: list[Any]) -> None:
        conn.execute("INSERT INTO scratch(a) VALUES (?)", (len(records),))
        applied.append([(r.position, r.event.text) for r in records])

    def add(tx: Any) -> None:
        store.add_inline(apply)

    await store.transact(add)
    await store.transact(add)  # a second time changes nothing
    await store.append("a", [note("1"), note("2")], 0)

    def fail_after_appending(tx: Any) -> None:
        tx.append("a", [note("undone")], 2)
        tx.execute("SELECT 1")  # flushes the row, so that the inline apply runs here
        raise RuntimeError("undone")

    with pytest.raises(RuntimeError, match="undone"):
        await store.transact(fail_after_appending)
    await store.append("b", [note("3")], 0)
    rows = await store.read_sql(lambda conn: conn.execute("SELECT a FROM scratch").fetchall())
    assert sorted(r[0] for r in rows) == [1, 2]  # the failed transaction's row went with it
    assert [a for a in applied if a != [(3, "undone")]] == [[(1, "1"), (2, "2")], [(3, "3")]]


async def test_a_transaction_offers_the_same_members_on_both(store):
    def work(tx: Any) -> dict[str, Any]:
        tx.append_many([AppendRequest("a", [note("1")], 0), AppendRequest("b", [note("2"), note("3")], 0)])
        streams = tx.read_streams(["b", "a", "none"])
        appended = tx.append("a", [note("4")], 1)  # the version read_streams found
        page, scanned = tx.read_page(1, 10)  # sees the append just staged
        first, first_scanned = tx.read_page(0, 2, types=["note.*"])
        return {
            "page": ([r.event.text for r in page], scanned),
            "first": ([r.position for r in first], first_scanned),
            "dialect": tx.dialect,
            "now": tx.now,
            "streams": {s: [r.event.text for r in rs] for s, rs in streams.items()},
            "version": tx.stream_version("a"),
            "conn": tx.conn.execute("SELECT count(*) FROM events WHERE stream = ?", ("b",)).fetchone()[0],
            "appended": (appended.first_position, appended.version),
        }

    got = await store.transact(work)
    assert isinstance(got.pop("now"), float)
    assert got == {"dialect": store.dialect, "streams": {"b": ["2", "3"], "a": ["1"], "none": []},
                   "version": 2, "conn": 2, "appended": (4, 2),
                   "page": (["2", "3", "4"], 4), "first": ([1, 2], 2)}
    recorded = await store.read_all()
    assert len({r.recorded_at for r in recorded}) == 1  # the transaction's one `now`


async def test_transactions_committed_together_share_their_commit_group(store):
    import threading

    import trio.testing

    started, release = threading.Event(), threading.Event()
    groups: list[object] = []

    def hold(tx: Any) -> None:
        groups.append(tx.commit_group)
        started.set()
        release.wait()

    def note_group(tx: Any) -> None:
        groups.append(tx.commit_group)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.transact, hold)
            await trio.to_thread.run_sync(started.wait)  # the writer is in its thread
            nursery.start_soon(store.transact, note_group)
            nursery.start_soon(store.transact, note_group)
            await trio.testing.wait_all_tasks_blocked()  # both queued behind it
            release.set()
    assert len(groups) == 3
    assert groups[1] is groups[2] and groups[0] is not groups[1]


async def test_a_burst_of_appends_commits_in_batches_of_at_most_max_batch_in_order(store):
    from gormes.events.store_base import MAX_BATCH

    n = MAX_BATCH * 3 + 7
    woken_after: dict[int, int] = {}  # appender -> commits done when its append returned
    results: dict[int, Any] = {}

    async def appender(i: int) -> None:
        results[i] = await store.append(f"burst-{i}", [note(str(i))], expected_version=0)
        woken_after[i] = store.batches_committed

    before = store.batches_committed
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for i in range(n):  # all queued in one scheduler pass, before the writer looks
                nursery.start_soon(appender, i)
    # Uncapped, the writer would take all n in one batch and wake them together.
    per_commit: dict[int, int] = {}
    for commits in woken_after.values():
        per_commit[commits] = per_commit.get(commits, 0) + 1
    assert store.batches_committed - before == -(-n // MAX_BATCH)
    assert max(per_commit.values()) <= MAX_BATCH
    assert len(per_commit) == -(-n // MAX_BATCH)
    positions, streams = await all_positions_and_versions(store)
    assert positions == list(range(1, n + 1))
    by_position = {r.position: r.stream for r in await store.read_all()}
    assert all(by_position[r.last_position] == f"burst-{i}" for i, r in results.items())
    # callers of an earlier commit hold earlier positions
    order = sorted(results, key=lambda i: results[i].last_position)
    assert [woken_after[i] for i in order] == sorted(woken_after[i] for i in order)


# -- Postgres only ------------------------------------------------------------


@pytest.fixture
def pg_schema() -> Iterator[str]:
    with fresh_schema() as schema:
        yield schema


async def test_a_schema_with_another_applications_tables_is_refused_untouched(pg_schema):
    from gormes.errors import NotAGormesDatabase

    admin(f'CREATE TABLE "{pg_schema}".orders(id integer)')
    with pytest.raises(NotAGormesDatabase, match="another application"):
        async with open_store(PG_URL, schema=pg_schema):
            pass
    tables = admin(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (pg_schema,)
    )
    assert tables == [("orders",)]


async def test_an_unreachable_server_is_one_clear_error():
    from gormes.errors import StoreError

    with pytest.raises(StoreError, match="cannot connect to PostgreSQL at postgresql://nobody:\\*\\*\\*@"):
        async with open_store("postgresql://nobody:secret@127.0.0.1:1/none"):
            pass


async def test_type_globs_match_like_sqlite_glob(pg_schema):
    async with open_store(PG_URL, schema=pg_schema) as store:
        await store.append("a", [note("1")])
        for pattern, expected in [("note.*", 1), ("n?te.added", 1), ("note.[a]dded", 1),
                                  ("note", 0), ("*.added", 1), ("note.%", 0), ("note._dded", 0)]:
            assert len(await store.read_all(types=[pattern])) == expected, pattern


async def test_read_streams_after_versions_reads_only_the_tails_on_both(store):
    await store.append("a", [note("1"), note("2"), note("3")], 0)
    await store.append("b", [note("4")], 0)

    def read(log: Any) -> dict[str, list[str]]:
        found = log.read_streams(["a", "b", "c", "none"], after={"a": 1, "b": 1, "none": 5})
        return {s: [r.event.text for r in rs] for s, rs in found.items()}

    expected = {"a": ["2", "3"], "b": [], "c": [], "none": []}
    assert await store.read_with(read) == expected

    def work(tx: Any) -> tuple[dict[str, list[int]], int]:
        tx.append("c", [note("5"), note("6")], 0)
        found = tx.read_streams(["a", "c"], after={"a": 2, "c": 1})  # sees its own staged append
        appended = tx.append("a", [note("7")], 3)  # the version the tail ended at
        return {s: [r.version for r in rs] for s, rs in found.items()}, appended.version

    assert await store.transact(work) == ({"a": [3], "c": [2]}, 4)


async def test_a_transaction_reads_a_stream_after_a_version_of_the_given_types_only_on_both(store):
    from gormes.events.runs import RunMessageSent

    def sent(i: int) -> RunMessageSent:
        return RunMessageSent(message_id=f"M{i}", sender="s", payload=i, sent_at=i)

    await store.append("run-x", [note("1"), sent(1), note("2"), sent(2), note("3")], 0)

    def work(tx: Any) -> tuple[list[int], list[int], int]:
        typed = [r.version for r in tx.read_stream("run-x", 1, ["run.message_sent"])]
        from_start = [r.version for r in tx.read_stream("run-x", 0, ["run.message_sent"])]
        # a typed read tells no version: the append still lands after the last event
        return typed, from_start, tx.append("run-x", [note("4")]).version

    assert await store.transact(work) == ([2, 4], [2, 4], 6)


async def test_a_transaction_in_a_batch_reads_the_appends_queued_before_it_and_a_failing_reader_leaves_nothing(store):
    import threading

    from trio.testing import wait_all_tasks_blocked

    started, release = threading.Event(), threading.Event()
    results: dict[str, Any] = {}

    def hold(tx: Any) -> None:
        started.set()
        release.wait()

    def reads_a_and_b(tx: Any) -> tuple[list[str], list[str]]:
        return [r.event.text for r in tx.read_stream("a")], [r.event.text for r in tx.read_stream("b")]

    def reads_then_fails(tx: Any) -> None:
        tx.read_stream("a")
        tx.append("c", [note("undone")], expected_version=0)
        raise RuntimeError("boom")

    def reads_b_then_appends(tx: Any) -> list[str]:
        seen = [r.event.text for r in tx.read_stream("b")]
        tx.append("b", [note("after")], expected_version=len(seen))
        return seen

    async def run(name: str, fn: Any) -> None:
        try:
            results[name] = await store.transact(fn)
        except RuntimeError as exc:
            results[name] = str(exc)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.transact, hold)
            await trio.to_thread.run_sync(started.wait)  # the writer is in its thread
            # queued in this order behind it, so that all of them share the next batch
            nursery.start_soon(store.append, "a", [note("staged")], 0)
            await wait_all_tasks_blocked()
            for name, fn in [("ab", reads_a_and_b), ("fails", reads_then_fails), ("b", reads_b_then_appends)]:
                nursery.start_soon(run, name, fn)
                await wait_all_tasks_blocked()
            release.set()
    assert results == {"ab": (["staged"], []), "fails": "boom", "b": []}
    assert [r.event.text for r in await store.read_stream("a")] == ["staged"]
    assert [r.event.text for r in await store.read_stream("b")] == ["after"]
    assert await store.read_stream("c") == []
    positions, _ = await all_positions_and_versions(store)
    assert positions == [1, 2]


async def test_a_burst_of_concurrent_reads_opens_a_few_connections_not_one_each_on_both(store):
    """Thousands of jobs starting together each read their stream: the reads wait
    for one of the store's few read connections instead of each opening its own
    (which cost ~1 ms of schema checks on SQLite, and on PostgreSQL a backend each,
    past the server's max_connections)."""
    import os
    import time

    from gormes.events.store_base import READ_CONNECTIONS

    def files_open() -> int:  # this process's descriptors of the SQLite file
        db = os.path.realpath(store.path)
        return sum(1 for fd in os.listdir("/proc/self/fd")
                   if os.path.realpath(f"/proc/self/fd/{fd}") == db)

    await store.append("s", [note("1")], 0)
    sqlite = getattr(store, "dialect", "sqlite") == "sqlite"
    before = files_open() if sqlite else 0

    def slow_read(log: Any) -> int:
        time.sleep(0.002)  # long enough that the reads overlap
        return log.stream_version("s")

    async with trio.open_nursery() as nursery:
        for _ in range(200):
            nursery.start_soon(slow_read_of, store, slow_read)
    assert 1 <= len(store._readers) <= READ_CONNECTIONS  # every reader opened is back in the pool
    if sqlite:  # SQLite may keep a closed connection's descriptor while others hold locks on the file
        assert files_open() - before <= 2 * READ_CONNECTIONS


async def slow_read_of(store: Any, read: Any) -> None:
    assert await store.read_with(read) == 1


async def test_a_point_read_and_many_streams_versions_in_one_query(store):
    await store.append("a", [note("1"), note("2")])
    await store.append("b", [note("3")])
    assert await store.read_point(lambda log: log.stream_versions(["a", "none", "b", "a"])) == {
        "a": 2, "none": 0, "b": 1}
    assert await store.read_point(lambda log: log.stream_versions([])) == {}
