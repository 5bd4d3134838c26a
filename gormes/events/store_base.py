"""What the SQLite and PostgreSQL stores share: the writer's request batches and
its loop, the read methods built on `read_with`, the wake-ups of followers, and
the subscription that follows the log.

A store mixing in `GroupCommitCalls` provides `_commit_batch(requests, started)`
(commit one batch, setting each request's result or error, and call `started()`
once the commit is under way) and `_close_connections()`.
A store mixing in `LogReads` provides `read_with(fn)` (run `fn(log)` on a read
connection in a worker thread) and `_changes` (a `Changes`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio
from outcome import Error, Outcome, Value
from trio.lowlevel import (
    Abort,
    Task,
    current_task,
    current_trio_token,
    enable_ki_protection,
    reschedule,
    start_thread_soon,
    wait_task_rescheduled,
)

from gormes.errors import StoreClosed, StoreReadOnly
from gormes.events.base import Event, Recorded
from gormes.events.own_writes import OwnWrites, plain_names
from gormes.events.store import PAGE, AppendRequest, AppendResult, InlineApply

T = TypeVar("T")
A = TypeVar("A")

# At most this many requests share one commit. An uncapped batch takes everything
# queued while the previous one committed: with thousands of runs waking in one
# scheduler pass, that is all of them, and they then move through every step
# together and sleep together, the loop idle while they do (decision 0041). A
# capped batch wakes its callers a thousand at a time, so their steps spread
# over time and one run's wait overlaps another's work.
MAX_BATCH = 1024


class _Request:
    """One caller's write, and the task waiting for it to commit."""

    __slots__ = ("kind", "payload", "result", "error", "task")

    def __init__(self, kind: str, payload: Any, task: Task | None = None) -> None:
        self.kind = kind  # "append" | "transact"
        self.payload = payload
        self.result: Any = None
        self.error: BaseException | None = None
        self.task = task  # None once woken, or if its caller was cancelled

    def abandon(self, _raise_cancel: Any) -> Abort:
        """Abort callback of the caller's wait: a cancelled caller stops waiting (its
        request, already queued, still commits with its batch)."""
        self.task = None
        return Abort.SUCCEEDED

    @staticmethod
    def hold(_raise_cancel: Any) -> Abort:
        """Abort callback of a held wait (`append_held`, `transact_held`): the caller
        waits for the commit whatever cancel comes, which reaches it at its next
        checkpoint; what a shielded cancel scope around the wait does, without
        the scope's cost (decision 0038)."""
        return Abort.FAILED


class _Batch:
    """Requests that will share one transaction; `done.set()` once it committed
    wakes each caller with its own result or error.

    Each caller parks in `wait_task_rescheduled` and is rescheduled directly with
    its outcome: with a thousand callers per batch this is a good part cheaper than
    one `trio.Event` they all wait on and then each reading its request back.
    """

    __slots__ = ("requests",)

    def __init__(self) -> None:
        self.requests: list[_Request] = []

    def split(self, size: int) -> _Batch:
        """Keep the first `size` requests; return the rest, in order, as a new batch."""
        rest = _Batch()
        if len(self.requests) > size:
            rest.requests = self.requests[size:]
            del self.requests[size:]
        return rest

    @property
    def done(self) -> _Batch:
        return self  # `batch.done.set()`, as with the event this used to be

    @enable_ki_protection
    def set(self) -> None:
        for req in self.requests:
            task = req.task
            if task is not None:
                req.task = None
                error = req.error
                reschedule(task, Value(req.result) if error is None else Error(error))


async def in_thread(fn: Callable[[A], T], arg: A, started: Callable[[], None]) -> T:
    """`fn(arg)` in a worker thread, as `trio.to_thread.run_sync` runs it, calling
    `started()` once the thread has it: the writer wakes the last batch's callers
    there, so that their steps overlap the next commit. The wait is not
    cancellable: a commit under way always finishes."""
    task = current_task()
    token = current_trio_token()

    def deliver(result: Outcome[T]) -> None:  # in the worker thread
        token.run_sync_soon(reschedule, task, result)

    start_thread_soon(lambda: fn(arg), deliver)
    started()
    return await wait_task_rescheduled(_Request.hold)  # type: ignore[no-any-return]


class GroupCommitCalls:
    """Group commit: each request joins the batch that is filling up and waits for
    that batch's commit. The writer task swaps `_batch` for a new one and commits
    the old one (`_commit_batch`, the backend's), then wakes that batch's callers.
    Where the backend `_overlaps`, it wakes them once the next commit is under way,
    so that their steps overlap it, or at once if nothing else is queued (decision
    0052)."""

    readonly: bool
    inline: list[InlineApply]  # run in every write transaction (see `add_inline`)
    _changes: Changes

    def _init_group_commit(self) -> None:
        self._batch = _Batch()  # filling up while the previous one commits
        self._urgent = _Batch()  # committed on its own before the next `_batch`
        self._to_wake: _Batch | None = None  # committed, its callers not yet woken
        self._work = trio.Event()
        self._closed = False
        self._writer_done = trio.Event()
        self.batches_committed = 0

    def _read_only_error(self) -> StoreReadOnly:  # pragma: no cover - abstract
        raise NotImplementedError

    async def _commit_batch(  # pragma: no cover
        self, requests: list[_Request], started: Callable[[], None]
    ) -> None:
        """Commit `requests`, calling `started()` once the commit is under way."""
        raise NotImplementedError

    def add_inline(self, apply: InlineApply) -> None:
        """Run `apply(conn, records)` in every write transaction from now on, on the
        rows it inserts, before COMMIT (an inline projection: the job ledger).
        Adding the same `apply` again changes nothing. Call it inside a transact
        function, after catching the projection up there, so that no write falls
        between the two."""
        if apply not in self.inline:
            self.inline.append(apply)

    def _close_connections(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @asynccontextmanager
    async def _running(self, *background: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
        """The store's tasks (`background`, then the writer unless read-only) for
        the time of the body; at its end the queued writes still commit, then the
        tasks stop and the connections close. The body's exception is re-raised
        outside the nursery, so that it reaches the caller as itself, not wrapped
        in an ExceptionGroup."""
        body_error: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                for task in background:
                    nursery.start_soon(task)
                if not self.readonly:
                    nursery.start_soon(self._writer)
                try:
                    yield
                except BaseException as exc:  # noqa: BLE001 - re-raised below
                    body_error = exc
                finally:
                    await self.aclose()
                    try:
                        if not self.readonly:
                            await self._writer_done.wait()  # queued writes still commit
                    finally:
                        nursery.cancel_scope.cancel()  # the background tasks
        finally:
            self._close_connections()
        if body_error is not None:
            raise body_error

    async def _writer(self) -> None:
        try:
            while True:
                self._work = trio.Event()
                batch = self._take()
                if batch is None:
                    self._wake_committed()
                    if self._closed:  # once closed, only what is queued is left to commit
                        return
                    await self._work.wait()
                    continue
                self._changes.committing()
                try:
                    await self._commit_batch(batch.requests, self._wake_committed)
                finally:
                    self._wake_committed()  # a commit that failed to start said nothing
                    self._changes.committed_here()
                self.batches_committed += 1
                self._to_wake = batch
                if not self._overlaps():
                    # woken now, they queue their next requests before the writer looks again
                    self._wake_committed()
                    await trio.lowlevel.checkpoint()
        finally:
            self._wake_committed()
            self._writer_done.set()

    def _overlaps(self) -> bool:
        """Whether the last batch's callers wait for the next commit to start
        (decision 0052): the backend's, as it measured."""
        return False

    def _wake_committed(self) -> None:
        """Wake the callers of the batch last committed, if not yet woken: the
        backend calls it once its next commit is under way (decision 0052)."""
        batch, self._to_wake = self._to_wake, None
        if batch is not None:
            batch.done.set()

    def _take(self) -> _Batch | None:
        """The next batch to commit: the urgent requests, else the first `MAX_BATCH`
        of the batch filling up (the rest stays queued); None if nothing is queued."""
        if self._urgent.requests:  # ahead of the batch that filled meanwhile
            batch, self._urgent = self._urgent, _Batch()
            return batch
        batch = self._batch
        if not batch.requests:
            return None
        self._batch = batch.split(MAX_BATCH)
        return batch

    async def aclose(self) -> None:
        """Stop taking writes; requests already queued are still committed (the
        writer, woken, commits what is queued and then stops)."""
        self._closed = True
        self._work.set()

    async def append(
        self, stream: str, events: Sequence[Event], expected_version: int | None = None
    ) -> AppendResult:
        # `_submit` written out: this is the hot path of many small appenders.
        if self.readonly:
            raise self._read_only_error()
        if self._closed:
            raise StoreClosed("the event store is closed")
        req = _Request("append", [AppendRequest(stream, events, expected_version)], current_task())
        requests = self._batch.requests
        requests.append(req)
        if len(requests) == 1:  # the first of its batch tells the writer
            self._work.set()
        return (await wait_task_rescheduled(req.abandon))[0]

    async def append_held(
        self, stream: str, events: Sequence[Event], expected_version: int | None = None
    ) -> AppendResult:
        """`append`, its wait for the commit held against cancellation (`_Request.hold`)."""
        return (await self._submit("append", [AppendRequest(stream, events, expected_version)], held=True))[0]

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        return await self._submit("append", list(requests))

    async def transact_held(self, fn: Callable[[Any], T]) -> T:
        """`transact`, its wait for the commit held against cancellation (`_Request.hold`)."""
        return await self._submit("transact", fn, held=True)  # type: ignore[no-any-return]

    async def transact_urgent(self, fn: Callable[[Any], T]) -> T:
        """`transact`, committed in a transaction of its own ahead of the batch
        filling up: it waits for the commit in progress, not for the next batch
        (a worker's lease renewals, which must not queue behind ten thousand
        jobs' writes; decision 0025). For small writes that something depends on
        in time; everything else should share the group commit."""
        return await self._submit("transact", fn, urgent=True)  # type: ignore[no-any-return]

    async def _submit(self, kind: str, payload: Any, *, urgent: bool = False, held: bool = False) -> Any:
        if self.readonly:
            raise self._read_only_error()
        if self._closed:
            raise StoreClosed("the event store is closed")
        req = _Request(kind, payload, current_task())
        requests = (self._urgent if urgent else self._batch).requests
        requests.append(req)
        if len(requests) == 1:
            self._work.set()
        return await wait_task_rescheduled(_Request.hold if held else req.abandon)


class Changes:
    """Wakes followers when the log grows, in this process or any other.

    The writer calls `committing()` before each commit and `committed_here()` after
    it (a `bump()`; SQLite's `_Changes` also tells its own commits from another
    process's with them); a waiter that hears nothing for
    `poll_interval` seconds asks the backend's `poll` whether another process (or
    host) wrote, which bumps if so.
    """

    # What the store's own commits wrote, where it knows (SQLite's, gormes/events/own_writes.py).
    own_writes: OwnWrites | None = None

    def __init__(self, poll_interval: float) -> None:
        self.generation = 0
        self._event = trio.Event()
        self._poll_interval = poll_interval

    def bump(self) -> None:
        self.generation += 1
        self._event.set()
        self._event = trio.Event()

    def committing(self) -> None:
        """The store's own writer is about to commit a batch (`committed_here` follows)."""

    def committed_here(self) -> None:
        """The store's own writer committed a batch (or failed to)."""
        self.bump()

    async def poll(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def wait(self, seen_generation: int) -> None:
        while self.generation == seen_generation:
            with trio.move_on_after(self._poll_interval):
                await self._event.wait()
            if self.generation == seen_generation:
                await self.poll()


# The most read connections a store opens (and reads it runs at once): a burst of
# concurrent reads (thousands of jobs starting together) waits for one, instead of
# each opening a connection of its own (on SQLite ~1 ms of schema checks each, on
# PostgreSQL a backend each, past its max_connections). The readers are threads
# under one GIL, so more than a few run no faster.
READ_CONNECTIONS = 8


class LogReads:
    """Reads and subscriptions over `read_with` and `_changes` (see the module doc).
    A store's `read_with` holds one of its `_read_slots` while it reads."""

    _changes: Changes
    _read_slots: trio.CapacityLimiter

    async def read_with(self, fn: Callable[[Any], T]) -> T:  # pragma: no cover - abstract
        raise NotImplementedError

    async def read_sql(self, fn: Callable[[Any], T]) -> T:
        """`read_with`, handing `fn` the connection `?` SQL runs on on either
        database (`log.sql`, see `LogBase`)."""
        return await self.read_with(lambda log: fn(log.sql))

    async def read_point(self, fn: Callable[[Any], T]) -> T:
        """`read_with` for a read of a few rows found by key (see `EventStore`);
        here it is `read_with` itself (SQLite's store runs it on the loop)."""
        return await self.read_with(fn)

    async def head(self) -> int:
        return await self.read_with(lambda r: r.head())

    async def stream_version(self, stream: str) -> int:
        return await self.read_with(lambda r: r.stream_version(stream))

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        return await self.read_with(lambda r: r.read_stream(stream, after_version))

    async def read_all(
        self,
        after_position: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
    ) -> list[Recorded]:
        return await self.read_with(lambda r: r.read_all(after_position, limit, types))

    async def read_page(
        self, after_position: int, limit: int = PAGE, types: Sequence[str] | None = None
    ) -> tuple[list[Recorded], int, int]:
        return await self.read_with(lambda r: r.read_page(after_position, limit, types))

    async def wait_for_change(self, generation: int) -> None:
        await self._changes.wait(generation)

    @property
    def generation(self) -> int:
        return self._changes.generation

    @property
    def own_writes(self) -> OwnWrites | None:
        return self._changes.own_writes

    def subscribe(
        self, after: int = 0, types: Sequence[str] | None = None, page: int = PAGE
    ) -> Subscription:
        """Every event after `after` in position order, then new ones as they commit.

        Each page is read from one snapshot, and both stores make a committed prefix
        of positions visible atomically (SQLite by its single writer, PostgreSQL by
        numbering under the events table lock), so following by position never
        skips and never repeats.
        """
        return Subscription(self, after, types, page)


class Subscription:
    """An async iterator over the log from a position on; it never ends by itself.

    A plain class rather than an async generator, so that a consumer may stop at
    any point (break, cancellation) with nothing left to finalize.
    """

    def __init__(
        self, store: LogReads, after: int, types: Sequence[str] | None, page: int
    ) -> None:
        self._store = store
        self.position = after  # the last position delivered (or filtered out)
        self._types = types
        self._names = plain_names(types)  # set: it may pass over the store's own writes unread
        self._page = page
        self._buffer: list[Recorded] = []
        self._next = 0
        self._page_scanned = after

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Recorded:
        while self._next >= len(self._buffer):
            # a page is used up: move past everything it scanned, filtered-out tail too
            self.position = max(self.position, self._page_scanned)
            generation = self._store.generation
            own = self._store.own_writes
            if self._names is not None and own is not None:
                self.position = own.past(self.position, self._names)
                if own.quiet_head(generation) == self.position:
                    await self._store.wait_for_change(generation)
                    continue
            records, scanned, head = await self._store.read_page(
                self.position, self._page, self._types
            )
            self._buffer, self._next, self._page_scanned = records, 0, scanned
            if not records:
                self.position = scanned
                if scanned >= head:
                    await self._store.wait_for_change(generation)
        record = self._buffer[self._next]
        self._next += 1
        self.position = record.position
        return record
