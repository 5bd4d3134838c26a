"""The EventStore protocol: what every backend (SQLite, Postgres) offers.

Positions are global, gap-free and in commit order; versions count a stream's
events from 1. `expected_version` is the version the caller last saw: `NO_STREAM`
(0) for a new stream, `ANY` to skip the check.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
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

    def stream_version(self, stream: str) -> int: ...

    def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]: ...

    def append(
        self, stream: str, events: Sequence[Event], expected_version: int | None = ANY
    ) -> AppendResult: ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run SQL on the transaction's connection (projection tables, inline ledgers)."""
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

    def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]: ...

    def read_streams(self, streams: Iterable[str]) -> dict[str, list[Recorded]]: ...

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
    async def append(
        self, stream: str, events: Sequence[Event], expected_version: int | None = ANY
    ) -> AppendResult: ...

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]: ...

    async def transact(self, fn: Callable[[Transaction], T]) -> T: ...

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]: ...

    async def read_all(
        self,
        after_position: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
    ) -> list[Recorded]: ...

    async def head(self) -> int: ...

    def subscribe(
        self, after: int = 0, types: Sequence[str] | None = None
    ) -> AsyncIterator[Recorded]: ...

    async def aclose(self) -> None: ...
