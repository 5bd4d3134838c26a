"""The eventsourcing library's recorder contract, spoken by the gormes log.

A synchronous facade over `SQLiteLog`: the same file and the same `events` and
`tracking` tables gormes itself uses. A stored event's originator id is the
stream, its originator version the version, its topic the type and its state
the data; notification ids are our positions. eventsourcing calls a recorder from
many threads, so every use of the log's one connection holds a lock, and every
write is a BEGIN IMMEDIATE transaction.

    recorder = GormesProcessRecorder.open("gormes.db")
    recorder.insert_events([StoredEvent(uuid4(), 1, "topic", b"state")])
"""

from __future__ import annotations

import sqlite3
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from os import PathLike
from typing import Any, Self
from uuid import UUID

from eventsourcing.persistence import (
    ApplicationRecorder,
    IntegrityError,
    Notification,
    ProcessRecorder,
    StoredEvent,
    Subscription,
    Tracking,
    TrackingRecorder,
)

from gormes.events.base import Recorded
from gormes.events.sqlite_log import SQLiteLog
from gormes.events.sqlite_schema import translate_error

TYPE_VERSION = 1
_NOTIFICATION_COLUMNS = "position, stream, version, type, data"
_INSERT_EVENT = (
    "INSERT INTO events(stream, version, type, type_version, data, recorded_at) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
# Moves a tracking row forward only; a row left unchanged means a conflict.
_ADVANCE_TRACKING = (
    "INSERT INTO tracking(projection, position) VALUES (?, ?) "
    "ON CONFLICT(projection) DO UPDATE SET position = excluded.position "
    "WHERE excluded.position > tracking.position"
)


def to_originator_id(stream: str) -> UUID | str:
    """The stream as eventsourcing wrote it: a UUID if it is one, else the text."""
    if len(stream) == 36:
        try:
            uuid = UUID(stream)
        except ValueError:
            return stream
        if str(uuid) == stream:
            return uuid
    return stream


def _state(data: Any) -> bytes:
    # Events gormes wrote itself hold JSON text; eventsourcing wants bytes.
    return data if isinstance(data, bytes) else str(data).encode()


def _notification(row: tuple[int, str, int, str, Any]) -> Notification:
    position, stream, version, type_, data = row
    return Notification(
        id=position,
        originator_id=to_originator_id(stream),
        originator_version=version,
        topic=type_,
        state=_state(data),
    )


def _data_version(conn: sqlite3.Connection) -> int:
    """A number that changes whenever another connection commits to the file."""
    return conn.execute("PRAGMA data_version").fetchone()[0]


def _topics_clause(topics: Sequence[str]) -> str:
    return f" AND type IN ({', '.join('?' * len(topics))})" if topics else ""


class _LogRecorder:
    """What every recorder here shares: the log, its lock, transactions."""

    def __init__(self, log: SQLiteLog, *, owns_log: bool = False) -> None:
        self.log = log
        self._owns_log = owns_log
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str | PathLike[str], **kwargs: Any) -> Self:
        """Open (creating if needed) a gormes database; `close()` closes it."""
        return cls(SQLiteLog(path, **kwargs), owns_log=True)

    def close(self) -> None:
        if self._owns_log:
            with self._lock:
                self.log.close()

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self.log.conn

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self.log.begin()
            try:
                yield self.log.conn
            except sqlite3.IntegrityError as exc:
                self.log.rollback()
                raise IntegrityError(str(exc)) from exc
            except sqlite3.Error as exc:
                self.log.rollback()
                raise translate_error(exc, self.log.path) from exc
            except BaseException:
                self.log.rollback()
                raise
            self.log.commit()


class GormesTrackingRecorder(_LogRecorder, TrackingRecorder):
    def insert_tracking(self, tracking: Tracking) -> None:
        with self._writing() as conn:
            self._insert_tracking(conn, tracking)

    @staticmethod
    def _insert_tracking(conn: sqlite3.Connection, tracking: Tracking) -> None:
        cursor = conn.execute(
            _ADVANCE_TRACKING, (tracking.application_name, tracking.notification_id)
        )
        if cursor.rowcount != 1:
            raise IntegrityError(
                f"tracking of {tracking.application_name!r} is already at or past "
                f"notification {tracking.notification_id}"
            )

    def max_tracking_id(self, application_name: str) -> int | None:
        with self._reading() as conn:
            row = conn.execute(
                "SELECT position FROM tracking WHERE projection = ?", (application_name,)
            ).fetchone()
        return None if row is None else row[0]


class GormesApplicationRecorder(_LogRecorder, ApplicationRecorder):
    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> list[int]:
        if not stored_events:
            return []
        with self._writing() as conn:
            return self._insert_events(conn, stored_events)

    def _insert_events(
        self, conn: sqlite3.Connection, stored_events: Sequence[StoredEvent]
    ) -> list[int]:
        if not stored_events:
            return []
        now = self.log.clock()
        rows = [
            (str(e.originator_id), e.originator_version, e.topic, TYPE_VERSION, e.state, now)
            for e in stored_events
        ]
        conn.executemany(_INSERT_EVENT, rows)
        # Positions are max(position) + 1 under the write lock: the rows just
        # inserted are the last len(rows) positions.
        last = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
        ids = list(range(last - len(rows) + 1, last + 1))
        if self.log.inline:
            decode = self.log.codec.decode
            records = [
                Recorded(pos, r[0], r[1], r[2], decode(r[2], TYPE_VERSION, r[4]), now)
                for pos, r in zip(ids, rows)
            ]
            for apply in self.log.inline:
                apply(conn, records)
        return ids

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> list[StoredEvent]:
        sql = "SELECT stream, version, type, data FROM events WHERE stream = ?"
        params: list[Any] = [str(originator_id)]
        if gt is not None:
            sql += " AND version > ?"
            params.append(gt)
        if lte is not None:
            sql += " AND version <= ?"
            params.append(lte)
        sql += " ORDER BY version DESC" if desc else " ORDER BY version"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._reading() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [
            StoredEvent(to_originator_id(stream), version, type_, _state(data))
            for stream, version, type_, data in rows
        ]

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> list[Notification]:
        params: list[Any] = [start or 0]
        sql = f"SELECT {_NOTIFICATION_COLUMNS} FROM events WHERE position "
        sql += ">= ?" if inclusive_of_start else "> ?"
        if stop is not None:
            sql += " AND position <= ?"
            params.append(stop)
        sql += _topics_clause(topics) + " ORDER BY position LIMIT ?"
        params += [*topics, limit]
        with self._reading() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [_notification(row) for row in rows]

    def max_notification_id(self) -> int | None:
        with self._reading() as conn:
            return conn.execute("SELECT max(position) FROM events").fetchone()[0]

    def subscribe(self, gt: int | None = None, topics: Sequence[str] = ()) -> LogSubscription:
        return LogSubscription(self, gt=gt, topics=topics)


class GormesProcessRecorder(GormesTrackingRecorder, GormesApplicationRecorder, ProcessRecorder):
    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> list[int]:
        tracking: Tracking | None = kwargs.get("tracking")
        if tracking is None:
            return super().insert_events(stored_events)
        with self._writing() as conn:
            ids = self._insert_events(conn, stored_events)
            self._insert_tracking(conn, tracking)
        return ids


class LogSubscription(Subscription[GormesApplicationRecorder]):
    """Notifications after `gt` in order, then new ones as they are committed.

    It reads by position on a connection of its own, each page from one snapshot.
    A writer holds the database's write lock from choosing a position until it
    commits, so a snapshot always holds a gap-free prefix of positions: reading
    on from the last position seen never skips and never repeats. While caught up
    it polls `PRAGMA data_version`, which changes when any other connection
    commits, so it rereads only when there may be something new.
    """

    def __init__(
        self,
        recorder: GormesApplicationRecorder,
        gt: int | None = None,
        topics: Sequence[str] = (),
        *,
        poll_interval: float = 0.01,
        page: int = 500,
    ) -> None:
        super().__init__(recorder, gt=gt, topics=topics)
        self._poll_interval = poll_interval
        self._page = page
        self._position = gt or 0  # scanned up to here, matching topics or not
        self._buffer: deque[Notification] = deque()
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # stop() and __exit__ may come from another thread
        self._reader: SQLiteLog | None = None
        self._data_version = 0

    def stop(self) -> None:
        super().stop()
        self._stopped.set()

    def __exit__(self, *args: object, **kwargs: Any) -> None:
        try:
            super().__exit__(*args, **kwargs)
        finally:
            self._close()

    def __next__(self) -> Notification:
        while not self._stopped.is_set():
            if self._buffer:
                return self._buffer.popleft()
            if not self._fetch():
                self._wait_for_commit()
        self._close()
        raise StopIteration

    def _fetch(self) -> bool:
        with self._lock:
            if self._stopped.is_set():
                return False
            if self._reader is None:
                self._reader = self._recorder.log.reader()
            conn = self._reader.conn
            self._data_version = _data_version(conn)
            sql = (
                f"SELECT {_NOTIFICATION_COLUMNS} FROM events WHERE position > ? "
                f"AND position <= ?{_topics_clause(self._topics)} ORDER BY position LIMIT ?"
            )
            conn.execute("BEGIN")
            try:
                head = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
                params = [self._position, head, *self._topics, self._page]
                rows = conn.execute(sql, params).fetchall()
            finally:
                conn.execute("COMMIT")
        self._buffer.extend(_notification(row) for row in rows)
        # With topics, the rows read can end far before the head; move past the
        # rest of what this snapshot held so it is not scanned again.
        self._position = rows[-1][0] if len(rows) == self._page else max(head, self._position)
        return bool(rows)

    def _wait_for_commit(self) -> None:
        while not self._stopped.wait(self._poll_interval):
            with self._lock:
                if self._reader is None:
                    return
                if _data_version(self._reader.conn) != self._data_version:
                    return

    def _close(self) -> None:
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
