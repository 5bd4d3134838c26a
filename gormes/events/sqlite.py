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
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from os import PathLike
from typing import Any, TypeVar

import trio

from gormes.errors import StoreReadOnly
from gormes.events.codec import Codec, default_codec
from gormes.events.own_writes import OwnCommit, OwnWrites
from gormes.events.postgres_sql import SQLITE
from gormes.events.sqlite_log import SQLiteLog, WriteBatch
from gormes.events.sqlite_schema import translate_error
from gormes.events.store import InlineApply
from gormes.events.store_base import READ_CONNECTIONS, Changes, GroupCommitCalls, LogReads, _Request, in_thread
from gormes.events.transaction import BatchTransaction
from gormes.events.wal_watch import FALLBACK_POLL_S, SETTLE_S, watch_wal

T = TypeVar("T")


class _Changes(Changes):
    """Across processes, a poll reads `PRAGMA data_version` on a connection of its
    own, which changes whenever another connection committed: a cheap check with
    no read of the events table. Where the WAL file can be watched (wal_watch.py),
    `watch` reads it when the file was written, as long as somebody waits, and
    the poll beside it slows to `FALLBACK_POLL_S`."""

    def __init__(self, watcher: SQLiteLog, poll_interval: float) -> None:
        super().__init__(poll_interval)
        self._watcher = watcher
        self._data_version = self._read_data_version()
        self._wal = watch_wal(watcher.path)
        if self._wal is not None:
            self._poll_interval = max(poll_interval, FALLBACK_POLL_S)
        self._waiting = 0
        self._first_waiter = trio.Event()
        self._own_commit: trio.Event | None = None  # while this store's writer commits; set when in
        self.own_writes = OwnWrites()
        self.written: OwnCommit | None = None  # what the commit in flight wrote (the writer's thread sets it)

    def _read_data_version(self) -> int:
        return self._watcher.conn.execute("PRAGMA data_version").fetchone()[0]

    async def poll(self) -> None:
        if self._own_commit is not None:  # `committed_here` comes next, and bumps
            return
        dv = self._read_data_version()
        if dv != self._data_version:
            self._data_version = dv
            self.bump()

    async def wait(self, seen_generation: int) -> None:
        self._waiting += 1
        self._first_waiter.set()
        try:
            await super().wait(seen_generation)
        finally:
            self._waiting -= 1
            if not self._waiting:
                self._first_waiter = trio.Event()

    def committing(self) -> None:
        self._own_commit = trio.Event()

    def committed_here(self) -> None:
        # Our own commit changes `data_version` as another process's does. It is
        # taken in here, and a poll while it was being made did nothing, so that the
        # followers are woken once for it, by the bump below, not also by the watch
        # that heard it written. Another process's commit that either would have
        # seen is in what the bump has them read (they read after it).
        commit, self._own_commit = self._own_commit, None
        written, self.written = self.written, None
        self._data_version = self._read_data_version()
        # Read after `data_version`: a commit past this head changes it (gormes/events/own_writes.py).
        head = None if written is None else self._watcher.head()
        self.bump()
        self.own_writes.committed(written, self.generation, head)
        if commit is not None:
            commit.set()

    async def _check(self) -> bool:
        """`poll`, after this store's own commit if one is being made; True if it
        waited for one."""
        commit = self._own_commit
        if commit is not None:
            await commit.wait()
        await self.poll()
        return commit is not None

    async def watch(self) -> None:
        """The store's background task: bump when another process committed, heard
        on the WAL file while somebody waits (nothing to do without a watch)."""
        wal = self._wal
        if wal is None:
            return
        while True:
            if not self._waiting:
                await self._first_waiter.wait()
                wal.drain()  # writes made while nobody waited: the check below sees them
                await self.poll()
            await wal.written()
            # The commit becomes visible a moment after its last write, and a write
            # heard may be one of several commits: check at once, then again after
            # each gap of SETTLE_S; a write heard during a gap starts over, and so
            # does a check that had to wait for this store's own commit.
            await self._check()
            step = 0
            while step < len(SETTLE_S):
                with trio.move_on_after(SETTLE_S[step]):
                    await wal.written()
                    step = -1
                if await self._check():
                    step = -1
                step += 1

    def close(self) -> None:
        if self._wal is not None:
            self._wal.close()
        self._watcher.close()


class SQLiteEventStore(GroupCommitCalls, LogReads):
    dialect = SQLITE

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
        self._init_group_commit()
        self._readers: list[SQLiteLog] = []
        self._point_reader: SQLiteLog | None = None  # `read_point`'s, used on the loop's thread
        self._point_opening = trio.Lock()
        self._read_slots = trio.CapacityLimiter(READ_CONNECTIONS)
        self._changes = _Changes(log.reader(), poll_interval)

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        path: str | PathLike[str],
        *,
        readonly: bool = False,
        create: bool = True,
        durability: str | None = None,
        codec: Codec = default_codec,
        clock: Callable[[], float] = time.time,
        poll_interval: float = 0.005,
    ) -> AsyncIterator[SQLiteEventStore]:
        """`create=False`: a missing file is "no gormes database at PATH", as with
        `readonly` (the read commands, which must not leave a new file behind)."""
        log = await trio.to_thread.run_sync(
            lambda: SQLiteLog(
                path, readonly=readonly, create=create, durability=durability, codec=codec, clock=clock
            )
        )
        store = cls(log, poll_interval=poll_interval)
        async with store._running(store._changes.watch):
            yield store

    @property
    def inline(self) -> list[InlineApply]:
        """The inline projections: the log's, which the recorder facade runs too."""
        return self.log.inline

    def _close_connections(self) -> None:
        for reader in self._readers:
            reader.close()
        self._readers.clear()
        if self._point_reader is not None:
            self._point_reader.close()
            self._point_reader = None
        self._changes.close()
        self.log.close()

    # -- writes -------------------------------------------------------------

    async def transact(self, fn: Callable[[BatchTransaction], T]) -> T:
        """Run `fn(tx)` in the writer's thread inside one transaction, committed durably.

        If `fn` raises, everything it wrote is undone and the exception is re-raised
        here; the other requests of the same batch are unaffected.
        """
        return await self._submit("transact", fn)

    def _overlaps(self) -> bool:
        # Not with inline projections (a worker's job ledger): their statements are
        # `executemany` runs, which beside a busy loop wait for the GIL row by row;
        # the job path measured 2-7% slower overlapped (decision 0052).
        return not self.inline

    async def _commit_batch(self, requests: list[_Request], started: Callable[[], None]) -> None:
        if self._overlaps():
            await in_thread(self._commit, requests, started)
        else:  # its callers were woken: the thread starts after their steps, as it did before 0052
            await trio.to_thread.run_sync(self._commit, requests)

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
            wb.run(batch, self._run_transact)
            wb.finish()
            log.commit(wb.versions)
            if wb.types_inserted:
                self._changes.written = OwnCommit(wb.first_position, wb.last_position, frozenset(wb.types_inserted))
        except BaseException as exc:
            log.rollback()
            if isinstance(exc, sqlite3.Error):
                exc = translate_error(exc, log.path)
            for req in batch:
                req.error = exc
                req.result = None

    @staticmethod
    def _run_transact(wb: WriteBatch, req: _Request) -> None:
        # The SAVEPOINT waits until the function runs SQL (`WriteBatch.defer_savepoint`):
        # one that only appends sends nothing, and its rows go in with the batch's next INSERT.
        conn = wb.log.conn
        mark = wb.defer_savepoint()
        try:
            req.result = req.payload(BatchTransaction(wb))
            sent = wb.savepoint_sent
            if sent:
                wb.flush()
        except Exception as exc:
            wb.end_deferred()
            if wb.savepoint_sent:
                conn.execute("ROLLBACK TO transact")
                conn.execute("RELEASE transact")
            wb.restore(mark)
            req.error = translate_error(exc, wb.log.path) if isinstance(exc, sqlite3.Error) else exc
            return
        wb.end_deferred()
        if sent:
            conn.execute("RELEASE transact")
        wb.release(mark)

    # -- reads --------------------------------------------------------------

    async def read_with(self, fn: Callable[[SQLiteLog], T]) -> T:
        """Run `fn(log)` in a worker thread on one of the store's read connections.

        For read models (projection tables) that need SQL of their own; `fn` must
        only read. Each call sees one consistent snapshot if it opens a transaction.
        """
        async with self._read_slots:
            reader = self._readers.pop() if self._readers else None
            if reader is None:
                reader = await trio.to_thread.run_sync(self.log.reader)
            try:
                return await trio.to_thread.run_sync(fn, reader)
            finally:
                self._readers.append(reader)

    async def read_point(self, fn: Callable[[SQLiteLog], T]) -> T:
        """`read_with` for a read of a few rows found by key, run here on the loop's
        thread (see `EventStore.read_point`): a point query on a WAL database is
        tens of microseconds, the hop to a worker thread and back several times
        that, and each hop hands the GIL over twice. Its connection never waits
        for a lock (busy_timeout 0): if the database is busy (a recovery, another
        process holding it exclusively) the read goes to a worker thread as
        `read_with`, which waits its turn there."""
        await trio.lowlevel.checkpoint()
        reader = self._point_reader
        if reader is None:
            async with self._point_opening:  # reads starting together open one connection
                if self._point_reader is None:
                    opened = await trio.to_thread.run_sync(self.log.reader)
                    opened.conn.execute("PRAGMA busy_timeout = 0")
                    self._point_reader = opened
                reader = self._point_reader
        try:
            return fn(reader)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF not in _BUSY:  # an extended code's primary
                raise
            if reader.conn.in_transaction:
                reader.conn.execute("ROLLBACK")
        return await self.read_with(fn)


_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


@asynccontextmanager
async def open_store(path: str | PathLike[str], **kwargs: Any) -> AsyncIterator[SQLiteEventStore]:
    async with SQLiteEventStore.open(path, **kwargs) as store:
        yield store
