"""The EventStore contract, on a real SQLite file."""

from __future__ import annotations

import hashlib
import random
import sqlite3
import threading
from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing

from gormes.errors import (
    ConcurrencyError,
    NotAGormesDatabase,
    SchemaTooNew,
    StoreReadOnly,
    UnknownEventType,
)
from gormes.events.notes import NoteAdded
from gormes.events.sqlite import SQLiteEventStore
from gormes.events.sqlite_log import SQLiteLog
from gormes.events.sqlite_schema import APPLICATION_ID, SCHEMA_VERSION
from gormes.events.store import AppendRequest


def note(text: str) -> NoteAdded:
    return NoteAdded(text=text, author="test")


def positions_and_versions(path: Path) -> tuple[list[int], dict[str, list[int]]]:
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT position, stream, version FROM events ORDER BY position").fetchall()
    conn.close()
    streams: dict[str, list[int]] = {}
    for _, stream, version in rows:
        streams.setdefault(stream, []).append(version)
    return [r[0] for r in rows], streams


async def all_positions_and_versions(store) -> tuple[list[int], dict[str, list[int]]]:
    """Every position in the log, and each stream's versions, read through the store."""
    streams: dict[str, list[int]] = {}
    records = await store.read_all()
    for r in records:
        streams.setdefault(r.stream, []).append(r.version)
    return [r.position for r in records], streams


async def test_append_assigns_versions_from_one_and_positions_in_order(store):
    r1 = await store.append("a", [note("1"), note("2")], expected_version=0)
    r2 = await store.append("b", [note("3")], expected_version=0)
    r3 = await store.append("a", [note("4")], expected_version=2)
    assert (r1.first_position, r1.last_position, r1.version) == (1, 2, 2)
    assert (r2.first_position, r2.last_position, r2.version) == (3, 3, 1)
    assert (r3.first_position, r3.version) == (4, 3)
    assert await store.head() == 4
    stream_a = await store.read_stream("a")
    assert [(r.version, r.event.text) for r in stream_a] == [(1, "1"), (2, "2"), (3, "4")]
    assert [r.version for r in await store.read_stream("a", after_version=1)] == [2, 3]


async def test_version_mismatch_raises_and_writes_nothing(store):
    await store.append("a", [note("1")], expected_version=0)
    head = await store.head()
    with pytest.raises(ConcurrencyError) as info:
        await store.append("a", [note("2"), note("3")], expected_version=0)
    assert (info.value.expected, info.value.actual) == (0, 1)
    with pytest.raises(ConcurrencyError):
        await store.append("new", [note("x")], expected_version=3)
    assert await store.head() == head
    assert await store.read_stream("new") == []


async def test_append_many_is_atomic_across_streams(store):
    await store.append("parent", [note("p")], expected_version=0)
    results = await store.append_many(
        [AppendRequest("child", [note("done")], 0), AppendRequest("parent", [note("child_done")], 1)]
    )
    assert [r.version for r in results] == [1, 2]
    with pytest.raises(ConcurrencyError):
        await store.append_many(
            [AppendRequest("other", [note("x")], 0), AppendRequest("parent", [note("y")], 1)]
        )
    assert await store.read_stream("other") == []
    assert await store.head() == 3


async def test_any_expected_version_skips_the_check(store):
    await store.append("a", [note("1")])
    await store.append("a", [note("2")])
    assert [r.version for r in await store.read_stream("a")] == [1, 2]


async def test_fifty_concurrent_appenders_give_gap_free_commit_order(store, db_path):
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

    positions, streams = positions_and_versions(db_path)
    assert positions == list(range(1, 50 * 20 + 1))
    assert all(v == list(range(1, 21)) for v in streams.values())
    assert len(streams) == 50
    # each caller was told the position its event really got
    by_position = {r.position: (r.stream, r.version) for r in await store.read_all()}
    assert all(by_position[pos] == (s, v) for s, v, pos in acknowledged)
    assert store.batches_committed < 50 * 20  # group commit shared transactions


async def test_concurrent_appends_to_one_stream_conflict_and_lose_nothing(store):
    outcomes: list[str] = []

    async def writer(i: int) -> None:
        try:
            await store.append("hot", [note(str(i))], expected_version=0)
            outcomes.append("ok")
        except ConcurrencyError:
            outcomes.append("conflict")

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(writer, i)
    assert outcomes.count("ok") == 1 and outcomes.count("conflict") == 19
    assert len(await store.read_stream("hot")) == 1


async def test_one_batch_of_mixed_requests_each_gets_what_it_asked_for(store):
    class Stray(msgspec.Struct, frozen=True, tag="stray.unregistered"):
        pass

    await store.append("taken", [note("0")], expected_version=0)
    outcomes: dict[str, object] = {}

    async def run(name: str, call) -> None:
        try:
            outcomes[name] = await call()
        except Exception as exc:  # noqa: BLE001 - the outcome is what is checked
            outcomes[name] = exc

    def in_tx(tx):
        return tx.append("tx", [note("t")], expected_version=tx.stream_version("tx"))

    calls = {
        **{f"one-{i}": (lambda i=i: store.append(f"z-one-{i}", [note(str(i))], 0)) for i in range(5)},
        "three": lambda: store.append("m-three", [note("a"), note("b"), note("c")], 0),
        "many": lambda: store.append_many(
            [AppendRequest("b-many", [note("x")], 0), AppendRequest("a-many", [note("y"), note("z")], 0)]
        ),
        "conflict": lambda: store.append("taken", [note("late")], expected_version=0),
        "stray": lambda: store.append("stray", [Stray()], 0),
        "stray-second": lambda: store.append("stray-2", [note("ok"), Stray()], 0),
        "tx": lambda: store.transact(in_tx),
    }
    before = store.batches_committed
    async with trio.open_nursery() as nursery:
        for name, call in calls.items():
            nursery.start_soon(run, name, call)
    assert store.batches_committed - before <= 2  # (the writer may take a first one early)

    assert isinstance(outcomes["conflict"], ConcurrencyError)
    assert isinstance(outcomes["stray"], UnknownEventType)
    assert isinstance(outcomes["stray-second"], UnknownEventType)
    assert await store.read_stream("stray") == [] and await store.read_stream("stray-2") == []
    assert [r.version for r in await store.read_stream("taken")] == [1]

    results = [outcomes[f"one-{i}"] for i in range(5)] + [outcomes["three"], outcomes["tx"]]
    results += outcomes["many"]
    positions, streams = await all_positions_and_versions(store)
    assert positions == list(range(1, 1 + 1 + 5 + 3 + 1 + 3))  # gap-free
    stored = {r.position: (r.stream, r.version) for r in await store.read_all()}
    for result in results:
        span = range(result.first_position, result.last_position + 1)
        assert [stored[p][0] for p in span] == [result.stream] * len(span)
        assert stored[result.last_position][1] == result.version
    assert streams["m-three"] == [1, 2, 3] and streams["a-many"] == [1, 2]


async def test_a_cancelled_appender_leaves_its_batch_mates_and_the_writer_unharmed(store):
    results = []
    victim = trio.CancelScope()

    async def appender(i: int) -> None:
        results.append(await store.append(f"mate-{i}", [note(str(i))], expected_version=0))

    async def cancelled() -> None:
        with victim:
            await store.append("victim", [note("v")], expected_version=0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancelled)
        for i in range(10):
            nursery.start_soon(appender, i)
        await trio.testing.wait_all_tasks_blocked()
        victim.cancel()

    assert sorted(r.stream for r in results) == sorted(f"mate-{i}" for i in range(10))
    # a queued request commits with its batch even if its caller stopped waiting
    assert len(await store.read_stream("victim")) == 1
    again = await store.append("victim", [note("w")], expected_version=1)
    assert again.version == 2 and again.last_position == 12


async def test_read_all_filters_by_type_and_glob(store):
    await store.append("a", [note("1")])
    assert [r.type for r in await store.read_all(types=["note.added"])] == ["note.added"]
    assert [r.type for r in await store.read_all(types=["note.*"])] == ["note.added"]
    assert await store.read_all(types=["job.*"]) == []
    await store.append("a", [note(str(i)) for i in range(9)])
    assert [r.position for r in await store.read_all(after_position=3, limit=4)] == [4, 5, 6, 7]


async def test_transact_reads_decides_and_appends_in_one_transaction(store):
    await store.append("counter", [note("1")], expected_version=0)

    def increment_if_below_three(tx):
        version = tx.stream_version("counter")
        if version >= 3:
            return None
        return tx.append("counter", [note(str(version + 1))], expected_version=version)

    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(store.transact, increment_if_below_three)
    assert [r.event.text for r in await store.read_stream("counter")] == ["1", "2", "3"]


async def test_a_failing_transact_is_undone_alone(store):
    def half_then_fail(tx):
        tx.append("x", [note("partial")], expected_version=0)
        tx.execute("CREATE TABLE scratch(a)")
        raise RuntimeError("boom")

    async def fails() -> None:
        with pytest.raises(RuntimeError, match="boom"):
            await store.transact(half_then_fail)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fails)
        nursery.start_soon(store.append, "y", [note("kept")], 0)
    assert await store.read_stream("x") == []
    assert [r.event.text for r in await store.read_stream("y")] == ["kept"]
    rows = await store.transact(lambda tx: tx.execute("SELECT name FROM sqlite_master WHERE name='scratch'").fetchall())
    assert rows == []


async def test_subscribe_neither_skips_nor_repeats_while_writers_run(store):
    total = 2000
    seen: list[int] = []

    async def follow() -> None:
        async for record in store.subscribe(after=0):
            seen.append(record.position)
            if len(seen) == total:
                return

    async def writer(w: int) -> None:
        for j in range(total // 4 // 5):
            await store.append(f"w{w}", [note(f"{j}.{k}") for k in range(5)])
            if j % 7 == 0:
                await trio.sleep(0)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            for w in range(4):
                nursery.start_soon(writer, w)
    assert seen == list(range(1, total + 1))


async def test_subscribe_with_type_filter_moves_past_other_events(store):
    await store.append("a", [note(str(i)) for i in range(2500)])
    got = []
    async for record in store.subscribe(after=0, types=["note.*"], page=300):
        got.append(record.position)
        if len(got) == 2500:
            break
    assert got == list(range(1, 2501))


async def test_subscribe_sees_appends_from_another_connection(store, db_path):
    other = SQLiteLog(db_path)
    seen: list[str] = []

    async def follow() -> None:
        async for record in store.subscribe(after=0):
            seen.append(record.event.text)
            if len(seen) == 3:
                return

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            for i in range(3):
                await trio.to_thread.run_sync(other.append_now, "elsewhere", [note(str(i))])
    other.close()
    assert seen == ["0", "1", "2"]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello, I am not a database\n" * 100)
    before = digest(path)
    with pytest.raises(NotAGormesDatabase):
        async with SQLiteEventStore.open(path):
            pass
    assert digest(path) == before


async def test_a_foreign_sqlite_database_is_refused_untouched(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t(x)")
    conn.commit()
    conn.close()
    before = digest(path)
    with pytest.raises(NotAGormesDatabase, match="not a gormes"):
        SQLiteLog(path)
    assert digest(path) == before
    assert not (tmp_path / "other.db-wal").exists()


async def test_a_database_from_a_newer_schema_is_refused_untouched(db_path):
    SQLiteLog(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = digest(db_path)
    with pytest.raises(SchemaTooNew, match="newer"):
        SQLiteLog(db_path)
    assert digest(db_path) == before


async def test_new_database_is_marked_as_ours_and_in_wal_mode(db_path):
    log = SQLiteLog(db_path, durability="normal")
    assert log.conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert log.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert log.conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    log.close()
    log = SQLiteLog(db_path)
    assert log.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL, the default
    log.close()


def test_opening_waits_for_another_process_switching_the_file_to_wal(tmp_path):
    # SQLite answers "locked" at once (no busy handler) to PRAGMA journal_mode=WAL
    # while another connection writes in rollback mode: what a process opening
    # the same brand-new file a moment earlier does. Opening must wait, not fail.
    import threading

    from gormes.events.sqlite_schema import connect

    path = tmp_path / "gormes.db"
    path.touch()
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE scratch (x)")
    release = threading.Timer(0.2, lambda: other.execute("ROLLBACK"))
    release.start()
    try:
        conn, readonly = connect(path)
        assert not readonly
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        conn.close()
    finally:
        release.join()
        other.close()


async def test_a_readonly_store_reads_but_refuses_writes(db_path):
    log = SQLiteLog(db_path)
    log.append_now("a", [note("1")])
    log.close()
    async with SQLiteEventStore.open(db_path, readonly=True) as store:
        assert [r.event.text for r in await store.read_all()] == ["1"]
        with pytest.raises(StoreReadOnly):
            await store.append("a", [note("2")])


async def test_events_survive_reopening(db_path):
    async with SQLiteEventStore.open(db_path) as store:
        await store.append("a", [note("1"), note("2")], 0)
    async with SQLiteEventStore.open(db_path) as store:
        assert [r.event for r in await store.read_stream("a")] == [note("1"), note("2")]
        await store.append("a", [note("3")], 2)
        assert await store.head() == 3


async def test_a_point_read_runs_on_the_loop_thread_and_in_a_worker_when_the_database_is_busy(store, db_path):
    await store.append("a", [note("1"), note("2")])
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def version(log: SQLiteLog) -> int:
        threads.append(threading.get_ident())
        return log.stream_versions(["a", "none"])["a"]

    opened: list[SQLiteLog] = []
    reader = store.log.reader

    def counting_reader() -> SQLiteLog:
        opened.append(reader())
        return opened[-1]

    store.log.reader = counting_reader
    results: list[int] = []

    async def read() -> None:
        results.append(await store.read_point(version))

    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(read)
    assert results == [2] * 20
    assert len(opened) == 1  # reads starting together open one connection between them
    assert set(threads) == {loop_thread}  # and each ran on the loop's thread: no hop

    # A WAL reader is busy only in states a test cannot arrange from outside (a
    # recovery of the WAL index in progress); the function raises what SQLite
    # raises then, once, and the read is made again in a worker thread.
    threads.clear()
    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorcode = sqlite3.SQLITE_BUSY | (1 << 8)  # SQLITE_BUSY_RECOVERY
    calls: list[int] = []

    def busy_once(log: SQLiteLog) -> int:
        calls.append(threading.get_ident())
        if len(calls) == 1:
            log.conn.execute("BEGIN")  # left open by the failed attempt: rolled back
            raise busy
        return version(log)

    assert await store.read_point(busy_once) == 2
    assert calls[0] == loop_thread and threads[0] != loop_thread

    def broken(log: SQLiteLog) -> int:
        log.conn.execute("SELECT 1 FROM nowhere")
        return 0

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await store.read_point(broken)  # any other error is the caller's
    assert await store.read_point(version) == 2
