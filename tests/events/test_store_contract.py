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
