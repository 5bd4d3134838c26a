"""Copy an SQLite log into PostgreSQL with positions preserved, then prove it.

    with Migration.open("gormes.db", "postgresql://db/gormes") as m:
        m.copy(progress=print)
        report = m.verify()

Rows are copied as stored (type, type_version, data text, recorded_at), in
batches, each batch in one transaction under the target's events table lock,
checking that nobody else wrote in between. The proof is a count and a SHA-256
over (position, stream, version, type, type_version, data) of every row in
position order, computed on each side from that side's own rows.

A target that already holds events is accepted only if they are an exact prefix
of the source (a migration that was interrupted, or is run again): the copy then
continues after them. Anything else is refused before a row is written. Such a
continuation writes into a log that may have been run since, and what it adds is
checked as an import of it would be: an event off its type's family of streams
is refused (gormes/events/families.py, decision 0086), and live
work (a job not ended, a schedule not removed, a record for a run the target holds
running or a budget it holds, a decision that would let a call run, a memory or
skill record that vouches for itself: decision 0071) is refused unless
`live_work` is given (decision 0068). A migration into an empty target
moves a whole log and keeps its live work.
A source whose events hold U+0000 (NUL) in a stream name or a type is refused up
front too: PostgreSQL's text cannot hold it (decision 0078). NUL in an event's
data moves (its JSON escapes it; the projections write U+FFFD for it).
Projection tables and tracking rows are not copied: projections rebuild from the
log on the target. The approvals index is built there at the end of the copy,
from the target's own events (decision 0057), so the target's approval reads
never fold the whole stream, even read-only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from os import PathLike
from typing import Any

import msgspec
import psycopg

from gormes.errors import StoreError, UserError
from gormes.events import audit_open
from gormes.events.approvals import Approval
from gormes.events.families import off_family
from gormes.events.jsonl import ParsedLine
from gormes.events.postgres_log import PostgresLog, PostgresWriteBatch
from gormes.events.postgres_schema import (
    channel_name,
    connect,
    first_line,
    prepare,
    redact,
)
from gormes.events.sqlite_log import SQLiteLog
from gormes.events.store import EventLog
from gormes.projections import approval_index
from gormes.tools.import_live_work import LiveWorkWatch, refusal

BATCH = 5000

Row = tuple[int, str, int, str, int, str, float]


class LogSummary(msgspec.Struct, frozen=True):
    events: int
    last_position: int
    sha256: str


class MigrationReport(msgspec.Struct, frozen=True):
    source: str
    target: str
    events: int  # events in the source, now all in the target
    copied: int  # of which this run copied
    already_present: int  # found in the target already (an exact prefix)
    last_position: int
    sha256: str
    verified: bool


class RowHash:
    """SHA-256 over rows' (position, stream, version, type, type_version, data)."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._encode = msgspec.json.Encoder().encode
        self.count = 0

    def update(self, rows: Iterable[Row]) -> None:
        for pos, stream, version, type_, tv, data, _at in rows:
            self._hash.update(self._encode((pos, stream, version, type_, tv, _text(data))))
            self._hash.update(b"\n")
            self.count += 1

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def _text(data: str | bytes) -> str:
    return data if isinstance(data, str) else data.decode("utf-8", "surrogateescape")


def row_pages(log: EventLog, after: int, upto: int, size: int = BATCH) -> Iterator[list[Row]]:
    """The log's stored rows in (after, upto], a page at a time, data as text."""
    while after < upto:
        rows = log.select_rows(after, size, upto=upto)
        if not rows:
            return
        yield [(*r[:5], _text(r[5]), r[6]) for r in rows]
        after = rows[-1][0]


def summarize(pages: Iterable[list[Row]]) -> LogSummary:
    digest = RowHash()
    last = 0
    for page in pages:
        digest.update(page)
        last = page[-1][0]
    return LogSummary(digest.count, last, digest.hexdigest())


class Migration:
    def __init__(self, source: SQLiteLog, target: PostgresLog, source_name: str, target_url: str) -> None:
        self.source = source
        self.target = target
        self.source_name = source_name
        self.target_url = target_url
        self.channel = channel_name(target.conn.execute("SELECT current_schema()").fetchone()[0])
        self.source_head = source.head()
        self.target_head = target.head()
        self.already_present = target.count()
        self.copied = 0

    @classmethod
    @contextmanager
    def open(cls, source_path: str | PathLike[str], target_url: str, *,
             live_work: bool = False) -> Iterator[Migration]:
        source = SQLiteLog(source_path, readonly=True, create=False)
        try:
            conn = connect(target_url, application_name="gormes-migrate")
            try:
                prepare(conn, target_url, create=True)
                migration = cls(source, PostgresLog(conn), str(source_path), target_url)
                migration.check_target_is_a_prefix()
                migration.check_postgresql_holds_the_names()
                migration.check_no_event_off_its_family()
                if not live_work:
                    migration.check_no_live_work_added()
                yield migration
            except psycopg.Error as exc:
                raise StoreError(f"database error on {redact(target_url)}: {first_line(exc)}") from None
            finally:
                conn.close()
        finally:
            source.close()

    @property
    def remaining(self) -> int:
        return max(self.source_head - self.target_head, 0)

    def check_target_is_a_prefix(self) -> None:
        if self.already_present == 0:
            return
        refuse = UserError(
            f"{redact(self.target_url)} already holds {self.already_present} events that are "
            f"not an exact prefix of {self.source_name}; refusing to write to it "
            "(migrate into an empty database or schema)"
        )
        if self.target_head > self.source_head:
            raise refuse
        theirs = summarize(row_pages(self.target, 0, self.target_head))
        ours = summarize(row_pages(self.source, 0, self.target_head))
        if theirs != ours:
            raise refuse

    def check_postgresql_holds_the_names(self) -> None:
        """Refuse, before a row is written, a source whose events to copy hold NUL in
        a stream name or a type (PostgreSQL's text cannot; only an import on SQLite
        before decision 0078 could write one). NUL anywhere else moves: the data is
        JSON, which escapes it, and the projections write U+FFFD for it."""
        found = self.source.first_nul_name(self.target_head, self.source_head)
        if found is not None:
            position, column = found
            raise UserError(
                f"{self.source_name}: the {column} name of the event at position {position} holds U+0000 "
                "(NUL), which PostgreSQL cannot store; nothing was copied. The log stays usable on SQLite; "
                "an export of it without that stream (`gormes export --stream`) can be imported"
            )

    def check_no_event_off_its_family(self) -> None:
        """Refuse a continuation that adds an event off its type's family of streams
        (what `events.import` refuses, live work or not: decision 0086). A migration
        into an empty target moves the log whole, as stored."""
        if self.already_present == 0 or self.remaining == 0:
            return
        rows = self.source.conn.execute(
            "SELECT position, stream, type FROM events WHERE position > ? AND position <= ? ORDER BY position",
            (self.target_head, self.source_head))
        for position, stream, type_ in rows:
            if (why := off_family(stream, type_)) is not None:
                raise UserError(f"{self.source_name}: the event at position {position}: {why}; nothing was "
                                "copied. A migration into an empty target moves the log whole")

    def check_no_live_work_added(self) -> None:
        """Refuse a continuation whose events leave live work in the target (what
        `events.import` refuses), before a row is written."""
        if self.already_present == 0 or self.remaining == 0:
            return
        found = live_work_in_copy(self.source, self.target, self.target_head, self.source_head)
        if found:
            raise UserError(refusal(f"{self.source_name} after position {self.target_head}", found,
                                    done="copied", do="Copy", source="it"))

    def copy(self, progress: Callable[[int], Any] | None = None, batch: int = BATCH) -> int:
        """Copy the source's events after the target's head, then index the
        target's approvals; returns how many events were copied."""
        for rows in row_pages(self.source, self.target_head, self.source_head, batch):
            self._write(rows)
            self.copied += len(rows)
            if progress is not None:
                progress(len(rows))
        self.index_approvals()
        return self.copied

    def index_approvals(self) -> None:
        """Build the approvals index from the target's events, or catch it up after
        a copy that continued (the source's index is not copied: it may lag its
        log, or be missing); and build the open write-ahead calls' index again if
        the target has one (the copied rows were not sealed here)."""
        conn = self.target.conn
        self.target.begin_write()
        try:
            approval_index.catch_up(self.target.sql, self.target.decode)
            audit_open.refresh(self.target.sql)
            conn.execute("COMMIT")
        except BaseException:
            if not conn.closed and not conn.broken:
                conn.execute("ROLLBACK")
            raise

    def _write(self, rows: list[Row]) -> None:
        conn = self.target.conn
        _, head = self.target.begin_write()
        try:
            if head != self.target_head:
                raise StoreError(
                    f"{redact(self.target_url)} was written by someone else during the "
                    f"migration (head {head}, expected {self.target_head}); stopped"
                )
            wb = PostgresWriteBatch(self.target, head)
            wb.append_rows(rows)
            wb.flush()
            conn.execute("SELECT pg_notify(%s, '')", (self.channel,))
            conn.execute("COMMIT")
        except BaseException:
            if not conn.closed and not conn.broken:
                conn.execute("ROLLBACK")
            raise
        self.target_head = rows[-1][0]

    def verify(self) -> MigrationReport:
        """Count and hash both sides up to the source's head; raise if they differ."""
        ours = summarize(row_pages(self.source, 0, self.source_head))
        theirs = summarize(row_pages(self.target, 0, self.source_head))
        if ours != theirs:
            raise StoreError(
                f"verification failed: the source has {ours.events} events "
                f"(sha256 {ours.sha256[:16]}...), the target {theirs.events} "
                f"(sha256 {theirs.sha256[:16]}...)"
            )
        return MigrationReport(
            source=self.source_name,
            target=redact(self.target_url),
            events=ours.events,
            copied=self.copied,
            already_present=self.already_present,
            last_position=ours.last_position,
            sha256=ours.sha256,
            verified=True,
        )


class _AsCopied:
    """What `LiveWorkWatch` asks of the transaction an import runs in, for a copy
    that leaves the target equal to the source: a stream's version as the target
    holds it before the copy, and its events as the source holds them (the
    target's after the copy)."""

    def __init__(self, source: SQLiteLog, target: PostgresLog) -> None:
        self.source = source
        self.target = target

    def stream_version(self, stream: str) -> int:
        return self.target.stream_version(stream)

    def read_stream(self, stream: str, after_version: int = 0) -> list[Any]:
        return self.source.read_stream(stream, after_version)

    def approval(self, _tx: Any, approval_id: str) -> Approval | None:
        return approval_index.approval_on(self.source.sql, self.source.decode, approval_id)


def live_work_in_copy(source: SQLiteLog, target: PostgresLog, after: int, upto: int) -> list[str]:
    """The live work the source's events in (after, upto] leave in the target once
    copied (`LiveWorkWatch`'s phrases; empty for history)."""
    as_copied = _AsCopied(source, target)
    watch = LiveWorkWatch(within="what is copied", approval=as_copied.approval)
    while after < upto:
        records = source.decode(source.select_rows(after, BATCH, upto=upto))
        if not records:
            break
        for record in records:
            watch.see(as_copied, ParsedLine(record.position, record.stream, record.event, record.version))
        after = records[-1].position
    return watch.found(as_copied)
