"""What the SQLite and PostgreSQL write batches share: the appends of one transaction.

A batch holds the writes of one write transaction: many callers' appends and
the transact functions run between them. It checks each append's expected
version, encodes the events and stages their rows, numbered from the head read
under the write lock; the backend's `flush` inserts the staged rows (a
multi-row INSERT per chunk on SQLite, a pipelined INSERT on PostgreSQL) and
hands them to the inline projections. Versions are looked up once per stream per
batch and kept current as rows are staged, so a batch of single-event appends
costs one lookup for all of its streams.

A savepoint (a transact function's writes, undone alone if it raises) is a
`mark`: it remembers only what changes after it (the versions it moves, in an
undo journal, and how many rows were staged), so taking one costs the same
whatever the batch holds: a batch of ten thousand transact calls would
otherwise copy ten thousand versions ten thousand times (decision 0025).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import msgspec

from gormes.errors import ConcurrencyError, StoreError, UnstorableStream, UserError
from gormes.events import log_sql
from gormes.events.base import Recorded
from gormes.events.log_base import LogBase, Row
from gormes.events.store import AppendRequest, AppendResult, InlineApply

T = TypeVar("T")

PREFETCH_CHUNK = 20000  # streams per version lookup


_ABSENT = -1  # in an undo journal: the stream had no version in the batch


class Mark:
    """Where a savepoint began (see `WriteBatchBase.mark`)."""

    __slots__ = ("outer", "position", "rows", "undo")

    def __init__(self, outer: Mark | None, position: int, rows: int) -> None:
        self.outer = outer  # the savepoint this one is inside, if any
        self.position = position
        self.rows = rows  # rows staged (not yet flushed) when it was taken
        self.undo: dict[str, int] = {}  # stream -> its version before the mark


def _check_stream(stream: str) -> None:
    if "\x00" in stream:
        raise UnstorableStream(stream)


def _first_stream(item: Any) -> str:
    payload = item.payload
    return payload[0].stream if payload else ""


class WriteBatchBase:
    """The staged writes of one transaction (see the module doc).

    `cache` holds stream versions known from earlier commits (SQLite's, valid while
    no other connection wrote); it is only read here, and updated by the log
    after COMMIT from `versions`.
    """

    def __init__(
        self,
        log: LogBase,
        head: int,
        *,
        inline: Sequence[InlineApply] = (),
        cache: dict[str, int] | None = None,
    ) -> None:
        self.log = log
        self.now = log.clock()
        self.inline = inline
        self._cache: dict[str, int] = {} if cache is None else cache
        self._versions: dict[str, int] = {}
        self._rows: list[Row] = []
        self._events: list[Any] = []  # the event of each staged row (None: decode it)
        # streams that may have rows staged (emptied when none is): what a read must flush for
        self._staged_streams: set[str] = set()
        self.first_position = self._next_position = head + 1
        self._mark: Mark | None = None  # the innermost open savepoint

    # -- the backend's part ---------------------------------------------------

    def flush(self, then: Callable[[], T] | None = None) -> T | None:  # pragma: no cover
        """Insert the staged rows so that SQL run next in the transaction sees
        them, then run `then` (SQL of the caller) and return its result."""
        raise NotImplementedError

    def read(self, then: Callable[[], T], streams: Iterable[str]) -> T:
        """`then()`, SQL that reads only the events of `streams`, seeing every
        write staged before it."""
        return self.flush(then)  # type: ignore[return-value]

    def send_pending(self) -> None:
        """Send statements the batch holds back (PostgreSQL's deferred SAVEPOINT)."""

    def finish(self) -> None:
        self.flush()

    @property
    def last_position(self) -> int:
        """The last position staged so far (`first_position - 1` if none)."""
        return self._next_position - 1

    # -- versions -------------------------------------------------------------

    @property
    def versions(self) -> dict[str, int]:
        """The streams written (or read whole) in this batch, at their versions."""
        return self._versions

    def version(self, stream: str) -> int:
        v = self._versions.get(stream)
        if v is None:
            v = self._cache.get(stream)
            if v is None:
                v = self.log.stream_version(stream)
            self._set_version(stream, v)
        return v

    def _set_version(self, stream: str, version: int) -> None:
        mark = self._mark
        if mark is not None and stream not in mark.undo:
            mark.undo[stream] = self._versions.get(stream, _ABSENT)
        self._versions[stream] = version

    def learn_version(self, stream: str, version: int) -> None:
        """A version just read in this transaction (after `flush`, under the write
        lock, so it is current): spares `version` its lookup."""
        if stream not in self._versions:
            self._set_version(stream, version)

    def forget_streams(self, streams: Iterable[str]) -> None:
        """Streams whose events this batch deleted (retention, decision 0029): at
        version 0 from now on, here and, after COMMIT, in the cache."""
        for stream in streams:
            self._set_version(stream, 0)

    def prefetch_versions(self, streams: Iterable[str]) -> None:
        """Look up the versions of many streams in one query (a batch of appends).

        Streams already known (written in this batch, or cached) are left to
        `version`, which finds them without a query."""
        versions, cache = self._versions, self._cache
        missing = list({s for s in streams if s not in cache and s not in versions})
        conn = self.log.sql
        mark = self._mark
        if mark is not None:
            for s in missing:
                mark.undo.setdefault(s, _ABSENT)
        for i in range(0, len(missing), PREFETCH_CHUNK):
            chunk = missing[i : i + PREFETCH_CHUNK]
            for s in chunk:
                versions[s] = 0
            sql, params = log_sql.stream_versions(conn, chunk)
            versions.update(conn.execute(sql, params))

    # -- staging --------------------------------------------------------------

    def run(self, requests: Sequence[Any], run_transact: Callable[[Any, Any], None]) -> None:
        """Stage a writer's batch in order: each append all or none and on its own,
        and `run_transact(self, request)` for each transact request, which sees
        the appends queued before it."""
        self.prefetch_versions(
            r.stream for req in requests if req.kind == "append" for r in req.payload
        )
        appends: list[Any] = []
        for req in requests:
            if req.kind == "append":
                appends.append(req)
                continue
            if appends:
                self.append_each(appends)
                appends = []
            run_transact(self, req)
        self.append_each(appends)

    def append(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        """Check every request's expected version, then stage all or none of them."""
        if len(requests) == 1:
            req = requests[0]
            return [self.append_one(req.stream, req.events, req.expected_version)]
        staged: dict[str, int] = {}
        for req in requests:
            _check_stream(req.stream)
            actual = staged.get(req.stream)
            if actual is None:
                actual = self.version(req.stream)
            if req.expected_version is not None and req.expected_version != actual:
                raise ConcurrencyError(req.stream, req.expected_version, actual)
            staged[req.stream] = actual + len(req.events)
        encode = self.log.codec.encode
        # every event encoded before any is staged: one that cannot be fails the call alone
        encoded = [[encode(event) for event in req.events] for req in requests]
        return [
            self._stage(req.stream, self._versions[req.stream], coded, req.events)
            for req, coded in zip(requests, encoded)
        ]

    def append_one(
        self, stream: str, events: Sequence[Any], expected_version: int | None = None
    ) -> AppendResult:
        """`append` of one request (a transact function's usual append)."""
        _check_stream(stream)
        actual = self.version(stream)
        if expected_version is not None and expected_version != actual:
            raise ConcurrencyError(stream, expected_version, actual)
        encode = self.log.codec.encode
        return self._stage(stream, actual, [encode(event) for event in events], events)

    def _stage(
        self, stream: str, version: int, coded: list[tuple[str, int, str]], events: Sequence[Any]
    ) -> AppendResult:
        """Stage a stream's encoded events after `version`."""
        rows, now = self._rows, self.now
        first = position = self._next_position
        for type_, tv, data in coded:
            version += 1
            rows.append((position, stream, version, type_, tv, data, now))
            position += 1
        self._events.extend(events)
        self._staged_streams.add(stream)
        self._next_position = position
        self._set_version(stream, version)
        return AppendResult(stream, first, position - 1, version)

    def append_each(self, requests: Iterable[Any]) -> None:
        """Stage many callers' appends, each all or none and independently of the others.

        Each item has `payload` (a list of `AppendRequest`) and gets `result` (their
        `AppendResult`s) or `error` (a `ConcurrencyError`, or why its events could not
        be encoded). The store's writer calls this with a whole batch: the common
        single-request single-event append is written out here, one loop for all.
        """
        versions, cache, rows, staged = self._versions, self._cache, self._rows, self._events
        staged_streams = self._staged_streams
        undo = None if self._mark is None else self._mark.undo
        encode = self.log.codec.encode
        now = self.now
        # In stream order: the rows then go into the (stream, version) index in key
        # order, which costs the database a good part less than the same rows in
        # random order (fewer page visits while inserting, fewer pages to write at
        # COMMIT). Concurrent callers' requests have no order among themselves; a
        # stream's own requests keep theirs (the sort is stable).
        for item in sorted(requests, key=_first_stream):
            payload = item.payload
            if len(payload) != 1 or len(payload[0].events) != 1:
                try:
                    item.result = self.append(payload)
                except (StoreError, UserError, msgspec.EncodeError, TypeError) as exc:
                    item.error = exc
                continue
            req = payload[0]
            stream = req.stream
            if "\x00" in stream:
                item.error = UnstorableStream(stream)
                continue
            version = versions.get(stream)
            if version is None:
                version = cache.get(stream)
                if version is None:
                    version = self.version(stream)
            expected = req.expected_version
            if expected is not None and expected != version:
                item.error = ConcurrencyError(stream, expected, version)
                continue
            event = req.events[0]
            try:
                type_, tv, data = encode(event)
            except (UserError, msgspec.EncodeError, TypeError) as exc:
                item.error = exc
                continue
            version += 1
            if undo is not None and stream not in undo:
                undo[stream] = versions.get(stream, _ABSENT)
            versions[stream] = version
            position = self._next_position
            rows.append((position, stream, version, type_, tv, data, now))
            staged.append(event)
            staged_streams.add(stream)
            self._next_position = position + 1
            item.result = [AppendResult(stream, position, position, version)]

    def append_rows(self, rows: Sequence[Row]) -> None:
        """Stage stored rows as they are (a migration), at the positions they carry."""
        self._rows.extend(rows)
        self._events.extend([None] * len(rows))
        self._staged_streams.update(row[1] for row in rows)
        if rows:
            self._next_position = rows[-1][0] + 1

    def staged_records(self) -> list[Recorded]:
        """The staged rows as records, for the inline projections (a row staged by
        `append_rows` is decoded; an appended one keeps the event it was given)."""
        decode = self.log.codec.decode
        return [
            Recorded(pos, stream, version, type_,
                     decode(type_, tv, data) if event is None else event, at)
            for (pos, stream, version, type_, tv, data, at), event in zip(self._rows, self._events)
        ]

    def clear_staged(self) -> None:
        self._rows.clear()
        self._events.clear()
        self._staged_streams.clear()
        mark = self._mark
        while mark is not None:  # what was staged before them is sent now
            mark.rows = 0
            mark = mark.outer

    # -- savepoints -----------------------------------------------------------

    def mark(self) -> Mark:
        """A point to return to if a savepoint is rolled back (call after `flush`,
        or where the rows staged before it stay staged: `restore` keeps them).
        End it with `restore` or `release`, innermost first."""
        self._mark = mark = Mark(self._mark, self._next_position, len(self._rows))
        return mark

    def restore(self, mark: Mark) -> None:
        """Back to `mark`: the versions it saw, the rows staged before it (what was
        flushed since is the database's to undo: ROLLBACK TO the savepoint)."""
        versions = self._versions
        for stream, version in mark.undo.items():
            if version == _ABSENT:
                versions.pop(stream, None)
            else:
                versions[stream] = version
        self._next_position = mark.position
        keep = min(mark.rows, len(self._rows))
        del self._rows[keep:]
        del self._events[keep:]
        self._mark = mark.outer

    def release(self, mark: Mark) -> None:
        """Keep what was written since `mark` (its savepoint was released)."""
        outer = self._mark = mark.outer
        if outer is not None:
            for stream, version in mark.undo.items():
                outer.undo.setdefault(stream, version)

