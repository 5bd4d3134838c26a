"""The SQLite event store: one writer task with group commit, reads in threads,
subscriptions that neither skip nor repeat.

Every append, append_many and transact call becomes a request on the writer's
channel. The writer takes whatever has queued up, runs it all in one transaction
in a worker thread (one thread hop and one fsync per batch) and wakes each caller
only after COMMIT returned, so an acknowledged event is durable. A request that
fails (a version conflict, an exception in a transact function) is undone alone;
the rest of its batch commits.

    async with SQLiteEventStore.open("gormes.db") as store:
        await store.append("job-1", [JobSubmitted(...)], expected_version=0)
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from os import PathLike
from typing import Any, TypeVar

import trio

from gormes.errors import StoreReadOnly
from gormes.events.base import Event, Recorded
from gormes.events.codec import Codec, default_codec
from gormes.events.sqlite_log import SQLiteLog, WriteBatch
from gormes.events.sqlite_schema import translate_error
from gormes.events.store import AppendRequest, AppendResult
from gormes.events.store_base import GroupCommitCalls, LogReads, _Batch, _Request

T = TypeVar("T")



class SQLiteTransaction:
    """The `Transaction` handed to `transact` functions."""

    def __init__(self, batch: WriteBatch) -> None:
        self._batch = batch
        self.conn: sqlite3.Connection = batch.log.conn
        self.now = batch.now

    def stream_version(self, stream: str) -> int:
        return self._batch.version(stream)

    def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        self._batch.flush()
        records = self._batch.log.read_stream(stream, after_version)
        if after_version == 0:  # the whole stream: its version, for the next append
            self._batch.learn_version(stream, records[-1].version if records else 0)
        return records

    def read_streams(self, streams: Iterable[str]) -> dict[str, list[Recorded]]:
        """Several whole streams in one query (see `SQLiteLog.read_streams`)."""
        self._batch.flush()
        found = self._batch.log.read_streams(streams)
        for stream, records in found.items():
            self._batch.learn_version(stream, records[-1].version if records else 0)
        return found

    def append(
        self, stream: str, events: Sequence[Event], expected_version: int | None = None
    ) -> AppendResult:
        return self._batch.append([AppendRequest(stream, events, expected_version)])[0]

    def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        return self._batch.append(requests)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        self._batch.flush()
        return self.conn.execute(sql, params)


class _Changes:
    """Wakes followers when the log grows, in this process or any other.

    In-process, the writer calls `bump()` after each commit. Across processes a
    waiter that times out polls `PRAGMA data_version` on a connection of its own,
    which changes whenever another connection committed: a cheap check with no read
    of the events table.
    """

    def __init__(self, watcher: SQLiteLog, poll_interval: float) -> None:
        self.generation = 0
        self._event = trio.Event()
        self._watcher = watcher
        self._poll_interval = poll_interval
        self._data_version = self._read_data_version()

    def _read_data_version(self) -> int:
        return self._watcher.conn.execute("PRAGMA data_version").fetchone()[0]

    def bump(self) -> None:
        self.generation += 1
        self._event.set()
        self._event = trio.Event()

    def poll(self) -> None:
        dv = self._read_data_version()
        if dv != self._data_version:
            self._data_version = dv
            self.bump()

    async def wait(self, seen_generation: int) -> None:
        while self.generation == seen_generation:
            with trio.move_on_after(self._poll_interval):
                await self._event.wait()
            if self.generation == seen_generation:
                self.poll()


class SQLiteEventStore(GroupCommitCalls, LogReads):
    def _read_only_error(self) -> StoreReadOnly:
        return StoreReadOnly(f"{self.path} is read-only: cannot write events")

    def __init__(
        self,
        log: SQLiteLog,
        *,
        poll_interval: float = 0.005,
    ) -> None:
        self.log = log
        self.path = log.path
        self.codec = log.codec
        self.readonly = log.readonly
        self._batch = _Batch()  # filling up while the previous one commits
        self._work = trio.Event()
        self._readers: list[SQLiteLog] = []
        self._changes = _Changes(log.reader(), poll_interval)
        self._closed = False
        self.batches_committed = 0

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        path: str | PathLike[str],
        *,
        readonly: bool = False,
        durability: str | None = None,
        codec: Codec = default_codec,
        clock: Callable[[], float] = time.time,
        poll_interval: float = 0.005,
    ) -> AsyncIterator[SQLiteEventStore]:
        log = await trio.to_thread.run_sync(
            lambda: SQLiteLog(
                path, readonly=readonly, durability=durability, codec=codec, clock=clock
            )
        )
        store = cls(log, poll_interval=poll_interval)
        # The caller's exception is re-raised outside the nursery so that it reaches
        # them as itself, not wrapped in an ExceptionGroup.
        body_error: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                if not store.readonly:
                    nursery.start_soon(store._writer)
                try:
                    yield store
                except BaseException as exc:
                    body_error = exc
                finally:
                    await store.aclose()
        finally:
            store._close_connections()
        if body_error is not None:
            raise body_error

    def _close_connections(self) -> None:
        for reader in self._readers:
            reader.close()
        self._readers.clear()
        self._changes._watcher.close()
        self.log.close()

    # -- writes -------------------------------------------------------------

    async def transact(self, fn: Callable[[SQLiteTransaction], T]) -> T:
        """Run `fn(tx)` in the writer's thread inside one transaction, committed durably.

        If `fn` raises, everything it wrote is undone and the exception is re-raised
        here; the other requests of the same batch are unaffected.
        """
        return await self._submit("transact", fn)

    async def _writer(self) -> None:
        while True:
            if not self._closed:  # once closed, only what is queued is left to commit
                await self._work.wait()
            self._work = trio.Event()
            batch = self._batch
            if not batch.requests:
                if self._closed:
                    return
                continue
            self._batch = _Batch()
            await trio.to_thread.run_sync(self._commit, batch.requests)
            self.batches_committed += 1
            batch.done.set()
            self._changes.bump()

    def _commit(self, batch: list[_Request]) -> None:
        """Runs in a worker thread: one transaction, one fsync, for the whole batch."""
        log = self.log
        try:
            log.begin()
        except BaseException as exc:
            for req in batch:
                req.error = exc
            return
        wb = WriteBatch(log)
        try:
            wb.prefetch_versions(
                r.stream for req in batch if req.kind == "append" for r in req.payload
            )
            appends: list[_Request] = []
            for req in batch:
                if req.kind == "append":
                    appends.append(req)
                    continue
                if appends:  # in batch order: a transact sees the appends queued before it
                    wb.append_each(appends)
                    appends = []
                self._run_transact(wb, req)
            wb.append_each(appends)
            wb.finish()
            log.commit(wb.versions)
        except BaseException as exc:
            log.rollback()
            if isinstance(exc, sqlite3.Error):
                exc = translate_error(exc, log.path)
            for req in batch:
                req.error = exc
                req.result = None

    @staticmethod
    def _run_transact(wb: WriteBatch, req: _Request) -> None:
        conn = wb.log.conn
        wb.flush()
        mark = wb.mark()
        conn.execute("SAVEPOINT transact")
        try:
            req.result = req.payload(SQLiteTransaction(wb))
            wb.flush()
        except Exception as exc:
            conn.execute("ROLLBACK TO transact")
            conn.execute("RELEASE transact")
            wb.restore(mark)
            req.error = translate_error(exc, wb.log.path) if isinstance(exc, sqlite3.Error) else exc
            return
        conn.execute("RELEASE transact")

    # -- reads --------------------------------------------------------------

    async def read_with(self, fn: Callable[[SQLiteLog], T]) -> T:
        """Run `fn(log)` in a worker thread on one of the store's read connections.

        For read models (projection tables) that need SQL of their own; `fn` must
        only read. Each call sees one consistent snapshot if it opens a transaction.
        """
        reader = self._readers.pop() if self._readers else None
        if reader is None:
            reader = await trio.to_thread.run_sync(self.log.reader)
        try:
            return await trio.to_thread.run_sync(fn, reader)
        finally:
            self._readers.append(reader)

@asynccontextmanager
async def open_store(path: str | PathLike[str], **kwargs: Any) -> AsyncIterator[SQLiteEventStore]:
    async with SQLiteEventStore.open(path, **kwargs) as store:
        yield store
