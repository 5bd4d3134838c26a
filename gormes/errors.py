"""The one exception hierarchy of gormes.

`UserError` and its subclasses carry a message fit to show a person on one line;
the CLI prints it and exits non-zero. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class GormesError(Exception):
    """Base of every error gormes raises on purpose."""


class UserError(GormesError):
    """Bad input or an impossible request: one clear line, non-zero exit."""

    exit_code = 2


class StoreError(GormesError):
    """The event store cannot do what was asked."""

    exit_code = 1


class NotAGormesDatabase(StoreError, UserError):
    """The file exists but was not written by gormes (or is not SQLite at all)."""


class SchemaTooNew(StoreError, UserError):
    """The database was written by a newer gormes; this one refuses to touch it."""


class StoreReadOnly(StoreError, UserError):
    """The database file (or its directory) cannot be written."""


class StoreFull(StoreError):
    """The disk holding the database is full; nothing of the failed batch was written."""


class StoreClosed(StoreError):
    """The store was closed while a caller still used it."""


class ConcurrencyError(StoreError):
    """A stream's version was not the one the caller expected; nothing was written."""

    def __init__(self, stream: str, expected: int | None, actual: int) -> None:
        super().__init__(
            f"stream {stream!r} is at version {actual}, expected {expected}"
        )
        self.stream = stream
        self.expected = expected
        self.actual = actual


class UnstorableStream(StoreError, UserError):
    """A stream name holding U+0000 (NUL): SQLite would take it, PostgreSQL cannot,
    and no log holding it could move there or be imported (decision 0078's addendum)."""

    def __init__(self, stream: str) -> None:
        super().__init__(f"stream {stream!r}: a stream name cannot contain NUL (0x00) bytes "
                         "(PostgreSQL cannot store one); nothing was written")
        self.stream = stream


class UnknownEventType(UserError):
    """An event type tag that no registered event class declares."""


class InvalidEventData(UserError):
    """Event data that does not match its type's schema."""


class ReadOnlyQuery(UserError):
    """A statement given to `gormes query` would write to the database."""


class QueryTimedOut(GormesError):
    """A statement given to `gormes query` ran past its `--timeout`."""

    exit_code = 1


class ProjectionError(GormesError):
    """A projection failed to apply a batch; its tracking position did not move."""
