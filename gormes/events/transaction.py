"""The `Transaction` a store hands to `transact` functions, on either backend.

It runs in the writer's thread, inside the writer's batch (`WriteBatchBase`):
appends are staged in the batch, and any read or SQL first flushes what is
staged, so it sees every earlier write of the transaction. `conn` and `execute`
take SQLite-style SQL (`?` placeholders) on both databases.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gormes.events.base import Event, Recorded
from gormes.events.store import AppendRequest, AppendResult
from gormes.events.write_batch import WriteBatchBase


class BatchTransaction:
    """The `Transaction` protocol over one write batch."""

    def __init__(self, batch: WriteBatchBase) -> None:
        self._batch = batch
        self.now = batch.now
        self.dialect: str = batch.log.dialect

    @property
    def commit_group(self) -> object:
        """The group commit this transaction is part of (the same object for every
        transaction committed with it): what may be cached until it commits."""
        return self._batch

    @property
    def conn(self) -> Any:
        """The connection, for SQL that need not see the rows staged just before."""
        self._batch.send_pending()  # a savepoint first: what runs here is undone with it
        return self._batch.log.sql

    def stream_version(self, stream: str) -> int:
        return self._batch.version(stream)

    def read_stream(
        self, stream: str, after_version: int = 0, types: Sequence[str] | None = None
    ) -> list[Recorded]:
        log = self._batch.log
        records = self._batch.read(lambda: log.read_stream(stream, after_version, types), (stream,))
        if after_version == 0 and not types:  # the whole stream: its version, for the next append
            self._batch.learn_version(stream, records[-1].version if records else 0)
        return records

    def read_streams(
        self, streams: Iterable[str], after: Mapping[str, int] | None = None
    ) -> dict[str, list[Recorded]]:
        """Several streams in one query, each whole or after a version of `after`
        (see `LogBase.read_streams`)."""
        log = self._batch.log
        wanted = list(streams)
        found = self._batch.read(lambda: log.read_streams(wanted, after), wanted)
        for stream, records in found.items():
            if records or not after or stream not in after:  # a tail that is empty tells no version
                self._batch.learn_version(stream, records[-1].version if records else 0)
        return found

    def read_page(
        self, after_position: int, limit: int, types: Sequence[str] | None = None
    ) -> tuple[list[Recorded], int]:
        log = self._batch.log

        def read() -> tuple[list[Recorded], int]:
            head = log.head()
            upto = min(head, after_position + limit) if types else head
            rows = log.select_rows(after_position, limit, types, upto=upto)
            scanned = rows[-1][0] if len(rows) == limit else max(upto, after_position)
            return log.decode(rows), scanned

        return self._batch.flush(read)  # type: ignore[return-value]

    def append(
        self, stream: str, events: Sequence[Event], expected_version: int | None = None
    ) -> AppendResult:
        return self._batch.append_one(stream, events, expected_version)

    def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        return self._batch.append(requests)

    def forget_streams(self, streams: Iterable[str]) -> None:
        """Streams whose events this transaction deleted (retention): at version 0 now."""
        self._batch.forget_streams(streams)

    def flush(self) -> None:
        """Send the rows staged so far to the database (still inside the transaction,
        undone with it): a long write keeps its memory bounded."""
        self._batch.flush()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        conn = self._batch.log.sql
        return self._batch.flush(lambda: conn.execute(sql, params))
