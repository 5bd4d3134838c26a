"""The EventStore protocol: what every backend (SQLite, Postgres) offers.

Positions are global, gap-free and in commit order; versions count a stream's
events from 1. `expected_version` is the version the caller last saw: `NO_STREAM`
(0) for a new stream, `ANY` to skip the check.

Everything a caller needs of a store is here, the same on both backends, so that
no caller has to know which one it holds: `EventStore` (async, the store),
`Transaction` (what a `transact` function is handed) and `EventLog` (one
blocking connection, what a `read_with` function is handed). SQL that callers
run (`read_sql`, `Transaction.execute`, `EventLog.sql`) is SQLite-style, with
`?` placeholders, on both; `dialect` says which fragments of
`gormes.events.sql_fragments` it takes where the two differ.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import msgspec

from gormes.events.base import Event, Recorded

ANY: None = None
NO_STREAM = 0

T = TypeVar("T")

PAGE = 1000  # events per page of a subscription

# An inline projection (the job ledger): called with the write transaction's
# connection (`?` SQL) and the records just inserted, before COMMIT.
InlineApply = Callable[[Any, list[Recorded]], None]


class AppendRequest(msgspec.Struct, frozen=True):
    """Events for one stream, with the version the caller expects it to be at."""

    stream: str
    events: Sequence[Event]
    expected_version: int | None = ANY


class AppendResult(msgspec.Struct, frozen=True):
    stream: str
    first_position: int
    last_position: int
    version: int  # the stream's version after the append


class Transaction(Protocol):
    """What a function run by `EventStore.transact` may do, all in one transaction.

    It runs synchronously in the writer thread; reads see every earlier write of
    the same transaction, and nothing is visible to others until it commits.
    """

    now: float  # the recorded_at of what this transaction appends
    dialect: str

    @property
    def conn(self) -> Any:
        """The transaction's connection (`?` SQL), for SQL that need not see the
        events appended just before in the same transaction (`execute` does)."""
        ...

    @property
    def commit_group(self) -> object:
        """The group commit this transaction is part of: the same object for every
        transaction committed together, and a new one for the next group."""
        ...

    def stream_version(self, stream: str) -> int: ...

    def read_stream(
        self, stream: str, after_version: int = 0, types: Sequence[str] | None = None
    ) -> list[Recorded]:
        """The stream's events after `after_version`; with `types` (names or GLOB
        patterns), only those: the others are not decoded."""
        ...

    def read_streams(
        self, streams: Iterable[str], after: Mapping[str, int] | None = None
    ) -> dict[str, list[Recorded]]:
        """Several streams, each in version order (empty for one without events):
        whole, or only the events after its version in `after`."""
        ...

    def read_page(
        self, after_position: int, limit: int, types: Sequence[str] | None = None
    ) -> tuple[list[Recorded], int]:
        """(events, scanned up to): at most `limit` events past `after_position`
        (with `types`, only those), seeing every write of the transaction and of
        the group before it; `scanned` is where a fold that read them moves to."""
        ...

    def append(
        self, stream: str, events: Sequence[Event], expected_version: int | None = ANY
    ) -> AppendResult: ...

    def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        """Several streams' appends, all or none."""
        ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run SQL on the transaction's connection (projection tables, inline ledgers)."""
        ...

    def forget_streams(self, streams: Iterable[str]) -> None:
        """Streams whose events this transaction deleted (retention, decision 0029):
        their versions are 0 from now on."""
        ...

    def flush(self) -> None:
        """Send what was appended so far to the database, still inside the
        transaction: a long write (an import) keeps its memory bounded."""
        ...


class EventLog(Protocol):
    """One blocking connection to the log: what `EventStore.read_with` hands its
    function, in a worker thread (an `SQLiteLog` or a `PostgresLog`)."""

    dialect: str

    @property
    def sql(self) -> Any:
        """The connection SQLite-style SQL (`?` placeholders) runs on, either database."""
        ...

    def head(self) -> int: ...

    def count(self) -> int: ...

    def stream_version(self, stream: str) -> int: ...

    def read_stream(
        self, stream: str, after_version: int = 0, types: Sequence[str] | None = None
    ) -> list[Recorded]: ...

    def read_streams(
        self, streams: Iterable[str], after: Mapping[str, int] | None = None
    ) -> dict[str, list[Recorded]]: ...

    def select_rows(
        self,
        after: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        *,
        streams: Sequence[str] | None = None,
        upto: int | None = None,
    ) -> list[tuple[Any, ...]]:
        """The stored rows `read_all` decodes: (position, stream, version, type,
        type_version, data, recorded_at)."""
        ...

    def read_all(
        self,
        after_position: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        *,
        streams: Sequence[str] | None = None,
        upto: int | None = None,
    ) -> list[Recorded]:
        """Events after `after_position` (up to `upto`), of these types and streams
        (names or GLOB patterns), in position order."""
        ...

    def read_page(
        self, after_position: int, limit: int, types: Sequence[str] | None = None
    ) -> tuple[list[Recorded], int, int]: ...


@runtime_checkable
class EventStore(Protocol):
    dialect: str  # "sqlite" or "postgres"
    readonly: bool  # opened read-only: every write raises StoreReadOnly

    async def append(
        self, stream: str, events: Sequence[Event], expected_version: int | None = ANY
    ) -> AppendResult: ...

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]: ...

    async def transact(self, fn: Callable[[Transaction], T]) -> T: ...

    async def append_held(
        self, stream: str, events: Sequence[Event], expected_version: int | None = ANY
    ) -> AppendResult:
        """`append`, returning only once the commit did, whatever cancel comes (it
        reaches the caller at its next checkpoint): a recording that must not be
        cut off between the append and its caller seeing the result."""
        ...

    async def transact_held(self, fn: Callable[[Transaction], T]) -> T:
        """`transact`, held against cancellation like `append_held`."""
        ...

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]: ...

    async def read_all(
        self,
        after_position: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
    ) -> list[Recorded]: ...

    async def head(self) -> int: ...

    async def stream_version(self, stream: str) -> int: ...

    async def read_page(
        self, after_position: int, limit: int = PAGE, types: Sequence[str] | None = None
    ) -> tuple[list[Recorded], int, int]:
        """(events, scanned up to, head), all from one snapshot: with a type filter
        `scanned` moves a follower past the events it filtered out, and
        `scanned == head` says it has caught up."""
        ...

    async def read_with(self, fn: Callable[[EventLog], T]) -> T:
        """`fn(log)` in a worker thread on a read connection of the store; `fn`
        must only read (it may run again on a new connection if one is lost)."""
        ...

    async def read_sql(self, fn: Callable[[Any], T]) -> T:
        """`read_with`, handing `fn` the connection `?` SQL runs on (`log.sql`)."""
        ...

    async def read_point(self, fn: Callable[[EventLog], T]) -> T:
        """`read_with` for a read of a few rows found by key (a few index lookups,
        nothing that grows): on SQLite `fn` runs on the calling thread, the event
        loop's, which costs it less than the hop to a worker thread and back, and
        in a thread after all when the database is busy; on PostgreSQL, a round
        trip, it is `read_with` (decision 0042)."""
        ...

    @property
    def generation(self) -> int:
        """A counter that moves whenever the log may have grown (in this process
        or another): read it before a read, then `wait_for_change(it)`."""
        ...

    async def wait_for_change(self, generation: int) -> None:
        """Return once `generation` has moved past the one given."""
        ...

    def subscribe(
        self, after: int = 0, types: Sequence[str] | None = None
    ) -> AsyncIterator[Recorded]: ...

    def add_inline(self, apply: InlineApply) -> None:
        """Run `apply(conn, records)` in every write transaction from now on, on
        the rows it inserts, before COMMIT; adding it again changes nothing."""
        ...

    async def aclose(self) -> None: ...
