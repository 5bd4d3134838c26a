"""The PostgreSQL event store: the `EventStore` protocol for many hosts sharing one log.

Built like the SQLite store: every append, append_many and transact call becomes
a request for one writer task, which runs whatever has queued up in one
transaction in a worker thread (psycopg 3's blocking API through
`trio.to_thread`: its async API is asyncio-only) and wakes each caller after
COMMIT returned. A failing request is undone alone (transact functions run in
savepoints); the rest of its batch commits.

Losing the connection is survived. Reads are retried on a new connection. A
write batch remembers its transaction id; if the connection drops before COMMIT
answered, the store reconnects (with backoff) and asks the server whether that
transaction committed (`pg_xact_status`): committed, the callers get their
results; aborted, the batch is run again. So nothing acknowledged is lost and
nothing is written twice. (A transact function may therefore run more than once:
it must do nothing outside its transaction.)

Followers wake on LISTEN/NOTIFY, with polling as the fallback while the
listening connection is down.

    async with PostgresEventStore.open("postgresql://host/db") as store:
        await store.append("job-1", [JobSubmitted(...)], expected_version=0)
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import psycopg
import trio

from gormes.errors import StoreError, StoreReadOnly
from gormes.events.codec import Codec, default_codec
from gormes.events.postgres_log import PostgresLog, PostgresWriteBatch, pipeline
from gormes.events.postgres_schema import (
    APPLICATION,
    STANDBY,
    cannot_write,
    channel_name,
    closed_by_its_data,
    connect,
    first_line,
    in_recovery,
    is_connection_lost,
    prepare,
    redact,
    url_application_name,
)
from gormes.events.postgres_sql import POSTGRES
from gormes.events.sqlite_schema import DURABILITY, default_durability
from gormes.events.store import InlineApply
from gormes.events.store_base import READ_CONNECTIONS, Changes, GroupCommitCalls, LogReads, _Request
from gormes.events.transaction import BatchTransaction

T = TypeVar("T")

_SAVEPOINT = "SAVEPOINT transact"
_RELEASE = "RELEASE SAVEPOINT transact"

BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 2.0


class ConnectionLost(Exception):
    """The writer's connection dropped; `xid` is the transaction that may have committed.
    `fault`: the error of a parameter that could not be sent (psycopg refuses text
    holding U+0000, and in a pipeline closes the connection too), raised where it
    cannot be told whose it is: the batch is then committed one request at a time."""

    def __init__(self, xid: int | None, fault: StoreError | None = None) -> None:
        super().__init__(f"connection lost (transaction {xid})")
        self.xid = xid
        self.fault = fault


def translate_error(exc: psycopg.Error, where: str) -> StoreError:
    return StoreError(f"database error on {where}: {first_line(exc)}")


class PostgresTransaction(BatchTransaction):
    """The `Transaction` handed to `transact` functions (see `BatchTransaction`).

    `execute` (and `conn.execute`) take the SQL both stores share, with SQLite's
    `?` placeholders (see gormes/events/postgres_sql.py); `pg` is the psycopg
    connection itself, for PostgreSQL's own SQL (`%s` placeholders).
    """

    _batch: PostgresWriteBatch

    @property
    def pg(self) -> psycopg.Connection:
        self._batch.send_pending()
        return self._batch.log.conn


class _Changes(Changes):
    """The writer and the LISTEN task bump; a poll, the fallback while the
    listening connection is down, compares the head with the last one seen."""

    def __init__(self, store: PostgresEventStore, poll_interval: float, head: int) -> None:
        super().__init__(poll_interval)
        self._store = store
        self._known_head = head

    async def poll(self) -> None:
        head = await self._store.head()
        if head != self._known_head:
            self._known_head = head
            self.bump()


class PostgresEventStore(GroupCommitCalls, LogReads):
    dialect = POSTGRES

    def _read_only_error(self) -> StoreReadOnly:
        if self.readonly_reason is not None:
            return StoreReadOnly(f"{self.where} is read-only here ({self.readonly_reason}): cannot write events")
        return StoreReadOnly(f"{self.where} was opened read-only: cannot write events")

    def __init__(
        self,
        url: str,
        writer: PostgresLog,
        *,
        schema: str,
        readonly: bool,
        readonly_reason: str | None = None,
        poll_interval: float,
        reconnect_timeout: float,
        application_name: str,
        durability: str,
        head: int,
    ) -> None:
        self.url = url
        self.where = f"{redact(url)} (schema {schema})"
        self.schema = schema
        self.codec = writer.codec
        self.clock = writer.clock
        self.readonly = readonly
        # why a store not asked to be read-only is (postgres_schema.cannot_write)
        self.readonly_reason = readonly_reason
        self.reconnect_timeout = reconnect_timeout
        self.application_name = application_name
        self.durability = durability
        self.channel = channel_name(schema)
        self._writer_log: PostgresLog | None = None if readonly else writer
        self._readers: list[PostgresLog] = [writer] if readonly else []
        self._read_slots = trio.CapacityLimiter(READ_CONNECTIONS)
        self._init_group_commit()
        self._changes = _Changes(self, poll_interval, head)
        self.writer_reconnects = 0
        # Inline projections (the job ledger, see gormes/projections/ledger.py): run
        # in every write transaction on the rows it inserts, before COMMIT.
        self.inline: list[InlineApply] = []

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        url: str,
        *,
        schema: str | None = None,
        readonly: bool = False,
        create: bool = True,
        durability: str | None = None,
        codec: Codec = default_codec,
        clock: Callable[[], float] = time.time,
        poll_interval: float = 0.5,
        reconnect_timeout: float = 60.0,
        application_name: str | None = None,
    ) -> AsyncIterator[PostgresEventStore]:
        """`application_name` (what pg_stat_activity shows): the URL's own
        `application_name` parameter when it has one, else "gormes"."""
        if application_name is None:
            application_name = url_application_name(url) or APPLICATION
        durability = durability or default_durability()
        if durability not in DURABILITY:
            raise StoreError(f"durability must be one of {sorted(DURABILITY)}, not {durability!r}")

        def first_connection() -> tuple[PostgresLog, str, int, str | None, bool]:
            conn = connect(url, schema=schema, application_name=application_name)
            try:
                reason = None if readonly else cannot_write(conn)
                # asked of a store opened read-only too: a follower there must not LISTEN
                standby = reason == STANDBY or (readonly and in_recovery(conn))
                name = prepare(conn, url, create=create and not readonly, readonly_reason=reason if create else None)
                log = PostgresLog(conn, codec=codec, clock=clock)
                return log, name, log.head(), reason, standby
            except BaseException:
                conn.close()
                raise

        log, name, head, reason, standby = await trio.to_thread.run_sync(first_connection)
        readonly = readonly or reason is not None
        store = cls(
            url, log, schema=name, readonly=readonly, readonly_reason=reason, poll_interval=poll_interval,
            reconnect_timeout=reconnect_timeout, application_name=application_name,
            durability=durability, head=head,
        )
        if not readonly:
            await trio.to_thread.run_sync(store._configure_writer, log)
        # A standby runs no LISTEN ("cannot be executed during recovery"): its
        # followers poll (the fallback every store has).
        async with store._running(*(() if standby else (store._listen,))):
            yield store

    def _close_connections(self) -> None:
        for log in self._readers:
            log.close()
        self._readers.clear()
        if self._writer_log is not None:
            self._writer_log.close()
            self._writer_log = None

    # -- connections --------------------------------------------------------

    def _connect_log(self) -> PostgresLog:
        conn = connect(self.url, schema=self.schema, application_name=self.application_name)
        return PostgresLog(conn, codec=self.codec, clock=self.clock)

    def _configure_writer(self, log: PostgresLog) -> None:
        setting = "on" if self.durability == "full" else "off"
        log.conn.execute(f"SET synchronous_commit TO {setting}")

    async def _reconnect(self) -> PostgresLog:
        """A new connection, retried with exponential backoff up to `reconnect_timeout`."""
        delay = BACKOFF_FIRST_S
        deadline = trio.current_time() + self.reconnect_timeout
        while True:
            try:
                log = await trio.to_thread.run_sync(self._connect_log)
            except StoreError as exc:
                if trio.current_time() + delay > deadline:
                    raise StoreError(
                        f"lost the connection to {self.where} and could not reconnect "
                        f"within {self.reconnect_timeout:g} s: {exc}"
                    ) from None
                await trio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
                continue
            return log

    # -- writes -------------------------------------------------------------

    async def transact(self, fn: Callable[[PostgresTransaction], T]) -> T:
        """Run `fn(tx)` in the writer's thread inside one transaction, committed durably.

        If `fn` raises, everything it wrote is undone and the exception is re-raised
        here; the other requests of the same batch are unaffected. `fn` may run again
        if the connection is lost before the commit is confirmed.
        """
        return await self._submit("transact", fn)

    async def _commit_batch(self, requests: list[_Request], started: Callable[[], None]) -> None:
        # `started` is not called: this writer does not overlap its commits with the
        # last batch's callers (`_overlaps`), which decision 0052 measured on SQLite only.
        try:
            await self._commit_durably(requests)
        except StoreError as exc:
            for req in requests:
                req.result, req.error = None, exc

    async def _commit_durably(self, requests: list[_Request]) -> None:
        while True:
            if self._writer_log is None:
                log = await self._reconnect()
                self.writer_reconnects += 1
                await trio.to_thread.run_sync(self._configure_writer, log)
                self._writer_log = log
            lost = await trio.to_thread.run_sync(self._commit, self._writer_log, requests)
            if lost is None:
                return
            self._writer_log.close()
            self._writer_log = None
            if lost.xid is not None and await self._committed(lost.xid):
                return
            for req in requests:
                req.result, req.error = None, None
            if lost.fault is not None:
                await self._commit_each_alone(requests, lost.fault)
                return

    async def _commit_each_alone(self, requests: list[_Request], fault: StoreError) -> None:
        """A batch with a request whose data could not be sent: each is committed on
        its own, so that only the one at fault fails (with `fault`), not the whole
        batch, and not again and again."""
        if len(requests) == 1:
            requests[0].error = fault
            return
        for req in requests:
            await self._commit_durably([req])

    async def _committed(self, xid: int) -> bool:
        """Whether transaction `xid` committed, asked after its connection was lost."""
        while True:
            status = await self.read_with(lambda log: log.xact_status(xid))
            if status == "committed":
                return True
            if status == "aborted":
                return False
            if status is None:
                raise StoreError(
                    f"lost the connection to {self.where} during a commit whose outcome "
                    "can no longer be known"
                )
            await trio.sleep(BACKOFF_FIRST_S)  # "in progress": its backend is still ending

    def _commit(self, log: PostgresLog, batch: list[_Request]) -> ConnectionLost | None:
        """Runs in a worker thread: one transaction for the whole batch.

        Returns a `ConnectionLost` when the connection dropped (nothing of it is
        decided yet), otherwise None with each request's result or error set.
        """
        xid: int | None = None
        try:
            xid, head = log.begin_write()
            wb = PostgresWriteBatch(log, head, self.inline)
            wb.run(batch, self._run_transact)
            conn = log.conn

            def notify_and_commit() -> None:
                conn.execute("SELECT pg_notify(%s, '')", (self.channel,))
                conn.execute("COMMIT")

            wb.flush(notify_and_commit, force=True)
            return None
        except BaseException as exc:  # noqa: BLE001 - handed to the callers
            if isinstance(exc, psycopg.Error) and closed_by_its_data(exc):
                return ConnectionLost(xid, translate_error(exc, self.where))  # whose? each alone
            if isinstance(exc, psycopg.Error) and is_connection_lost(exc, log.conn):
                return ConnectionLost(xid)
            self._rollback(log)
            if isinstance(exc, psycopg.Error):
                exc = translate_error(exc, self.where)
            for req in batch:
                req.error = exc
                req.result = None
            return None

    @staticmethod
    def _rollback(log: PostgresLog) -> None:
        try:
            if log.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                log.conn.execute("ROLLBACK")
        except psycopg.Error:
            pass

    def _run_transact(self, wb: PostgresWriteBatch, req: _Request) -> None:
        # SAVEPOINT and RELEASE are deferred: sent with the next statement, in
        # its round trip (`PostgresWriteBatch.defer`).
        conn = wb.log.conn
        wb.flush()
        mark = wb.mark()
        wb.defer(_SAVEPOINT)
        try:
            req.result = req.payload(PostgresTransaction(wb))
            wb.flush()
        except Exception as exc:
            if isinstance(exc, psycopg.Error) and is_connection_lost(exc, conn):
                raise
            if not wb.undefer(_SAVEPOINT):  # it was sent: undo what followed it
                with pipeline(conn):
                    conn.execute("ROLLBACK TO SAVEPOINT transact")
                    conn.execute(_RELEASE)
            wb.restore(mark)
            req.result = None
            req.error = translate_error(exc, self.where) if isinstance(exc, psycopg.Error) else exc
            return
        wb.defer(_RELEASE)
        wb.release(mark)

    # -- reads --------------------------------------------------------------

    async def read_with(self, fn: Callable[[PostgresLog], T]) -> T:
        """Run `fn(log)` in a worker thread on one of the store's read connections.

        For read models that need SQL of their own; `fn` must only read, since it is
        run again on a new connection if the old one is lost.
        """
        async with self._read_slots:
            while True:
                log = self._readers.pop() if self._readers else await self._reconnect()
                try:
                    result = await trio.to_thread.run_sync(fn, log)
                except psycopg.Error as exc:
                    if is_connection_lost(exc, log.conn):
                        log.close()
                        continue
                    self._rollback(log)
                    self._readers.append(log)
                    raise translate_error(exc, self.where) from None
                except BaseException:
                    self._rollback(log)
                    self._readers.append(log)
                    raise
                self._readers.append(log)
                return result

    # -- LISTEN/NOTIFY --------------------------------------------------------

    async def _listen(self) -> None:
        """Bump the generation on every NOTIFY; reconnect (with backoff) when dropped."""
        delay = BACKOFF_FIRST_S
        while True:
            log: PostgresLog | None = None
            try:
                log = await trio.to_thread.run_sync(self._connect_listener)
                delay = BACKOFF_FIRST_S
                self._changes.bump()  # anything committed while we were not listening
                await self._relay_notifications(log.conn)
            except (psycopg.Error, StoreError, OSError):
                pass
            finally:
                if log is not None:
                    log.close()
            await trio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)

    def _connect_listener(self) -> PostgresLog:
        log = self._connect_log()
        try:
            log.conn.execute(f'LISTEN "{self.channel}"')
        except BaseException:
            log.close()
            raise
        return log

    async def _relay_notifications(self, conn: psycopg.Connection) -> None:
        pgconn = conn.pgconn
        while True:
            await trio.lowlevel.wait_readable(conn.fileno())
            pgconn.consume_input()
            if pgconn.status != psycopg.pq.ConnStatus.OK:
                return
            notified = False
            while pgconn.notifies() is not None:
                notified = True
            if notified:
                self._changes.bump()
