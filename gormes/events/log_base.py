"""What the SQLite and PostgreSQL logs share: their blocking reads, one SQL text each.

A log (`SQLiteLog`, `PostgresLog`) is one connection to the database. Its `sql`
is the connection SQLite-style SQL (`?` placeholders) runs on: the sqlite3
connection itself, or on PostgreSQL a `PortableConnection`. The reads here run
the queries of `log_sql` on it; a subclass says only how a read snapshot opens
and closes (`SNAPSHOT`, `_end_snapshot`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gormes.events import log_sql
from gormes.events.base import Recorded
from gormes.events.codec import Codec

# A stored row: (position, stream, version, type, type_version, data, recorded_at)
Row = tuple[int, str, int, str, int, Any, float]


class LogBase:
    """One connection to the log, and the reads on it (see the module doc)."""

    dialect: str
    codec: Codec
    clock: Callable[[], float]  # recorded_at of what is written through it
    sql: Any  # the connection `?` SQL runs on (see the module doc)
    SNAPSHOT = "BEGIN"  # opens a transaction whose reads see one snapshot

    def _end_snapshot(self) -> None:
        self.sql.execute("COMMIT")

    def head(self) -> int:
        return self.sql.execute(log_sql.HEAD).fetchone()[0]

    def count(self) -> int:
        return self.sql.execute(log_sql.COUNT).fetchone()[0]

    def stream_version(self, stream: str) -> int:
        return self.sql.execute(log_sql.STREAM_VERSION, (stream,)).fetchone()[0]

    def stream_versions(self, streams: Sequence[str]) -> dict[str, int]:
        """The versions of several streams in one query (0 for one with no events)."""
        versions = dict.fromkeys(streams, 0)
        if versions:
            sql, params = log_sql.stream_versions(self.sql, list(versions))
            versions.update(self.sql.execute(sql, params).fetchall())
        return versions

    def read_stream(
        self, stream: str, after_version: int = 0, types: Sequence[str] | None = None
    ) -> list[Recorded]:
        """The stream's events after `after_version`; with `types`, only those
        (names or GLOB patterns), the others not even decoded."""
        if types:
            sql, params = log_sql.read_stream_of_types(self.sql, stream, after_version, types)
            return self.decode(self.sql.execute(sql, params).fetchall())
        rows = self.sql.execute(log_sql.READ_STREAM, (stream, after_version)).fetchall()
        return self.decode(rows)

    def read_streams(
        self, streams: Iterable[str], after: Mapping[str, int] | None = None
    ) -> dict[str, list[Recorded]]:
        """Several streams in one query: {stream: its events in version order}
        (an empty list for a stream with no events). `after`: a version for some
        of them, whose events up to it are left out (what a kept state has seen)."""
        wanted = list(dict.fromkeys(streams))
        out: dict[str, list[Recorded]] = {stream: [] for stream in wanted}
        if not wanted:
            return out
        if after:
            sql, params = log_sql.read_stream_tails(self.sql, [(s, after.get(s, 0)) for s in wanted])
        else:
            sql, params = log_sql.read_streams(self.sql, wanted)
        for record in self.decode(self.sql.execute(sql, params).fetchall()):
            out[record.stream].append(record)
        return out

    def select_rows(
        self,
        after: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        *,
        streams: Sequence[str] | None = None,
        upto: int | None = None,
    ) -> list[Row]:
        """The stored rows `read_all` would decode (see `log_sql.select_events`)."""
        sql, params = log_sql.select_events(
            self.sql, after, limit, types, streams=streams, upto=upto
        )
        return self.sql.execute(sql, params).fetchall()

    def read_all(
        self,
        after_position: int = 0,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        *,
        streams: Sequence[str] | None = None,
        upto: int | None = None,
    ) -> list[Recorded]:
        return self.decode(
            self.select_rows(after_position, limit, types, streams=streams, upto=upto)
        )

    def read_page(
        self, after_position: int, limit: int, types: Sequence[str] | None = None
    ) -> tuple[list[Recorded], int, int]:
        """(events, scanned up to, head), all from one snapshot.

        With a type filter the last matching event can be far behind the head;
        `scanned` lets a follower move past the events it filtered out, and
        `scanned == head` tells it that it has caught up.
        """
        self.sql.execute(self.SNAPSHOT)
        try:
            head = self.head()
            upto = min(head, after_position + limit) if types else head
            rows = self.select_rows(after_position, limit, types, upto=upto)
        finally:
            self._end_snapshot()
        scanned = rows[-1][0] if len(rows) == limit else max(upto, after_position)
        return self.decode(rows), scanned, head

    def decode(self, rows: Iterable[Row]) -> list[Recorded]:
        return self.codec.decode_rows(rows, Recorded)
