"""The projection runner: folds the log into a projection's tables, exactly once.

Each batch is applied in one store transaction that also moves the projection's
`tracking` row, so a batch's effects and its position commit together or not at
all. A runner catches up from its tracking position, then follows the log live;
`wait(position)` gives read-your-writes to code in the same process.

A projection is anything with this shape (see `streams.py`):

    name: str                 # also its row in `tracking`
    version: int              # bump it when `setup` or `apply` change meaning
    tables: Sequence[str]     # dropped by a rebuild
    setup(db)                 # sqlite_utils.Database: create or migrate the tables
    apply(conn, records)      # plain SQL on conn; never sqlite-utils' insert/upsert
    types (optional)          # only these event types (GLOB patterns); default all
    schema (optional)         # a schema.Schema: the tables described once, so the
                              # projection also runs on PostgreSQL

`apply` must be deterministic in the records alone: a rebuild from position 0
has to give the same rows.

The runner works on both stores. On PostgreSQL `conn` is the transaction's
PortableConnection (SQL with `?` placeholders, gormes/events/postgres_sql.py),
the tables come from `schema` (DDL, in the same transaction) and a projection
without one is refused with a `ProjectionError`. Every write transaction of the
PostgreSQL store holds the events table lock, so batches of one projection from
many processes or hosts take turns there exactly as under SQLite's write lock,
and the tracking check in `_apply_batch` keeps them from applying twice.
PostgreSQL is stricter in two places: an upsert's `DO UPDATE SET` must name the
table in a reference to the old row (`notes = note_counts.notes + excluded.notes`;
a bare `notes` is ambiguous there), and `INSERT OR REPLACE` does not exist
(`schema.replace_sql` writes the upsert both take).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import trio

from gormes.errors import GormesError, ProjectionError, StoreReadOnly
from gormes.events.base import Recorded
from gormes.events.catalog import load_all
from gormes.events.postgres_sql import POSTGRES, dialect_of
from gormes.projections import bookkeeping
from gormes.projections.schema import schema_of, supports

if TYPE_CHECKING:
    import sqlite_utils

    from gormes.events.store import EventStore, Transaction

BATCH = 1000

Progress = Callable[[int, int], None]  # (position applied, head)


class _Page(NamedTuple):
    after: int  # the position it was read after
    records: list[Recorded]
    scanned: int  # tracking moves here once the page is applied
    head: int


class Projection(Protocol):
    name: str
    version: int
    tables: Sequence[str]

    def setup(self, db: sqlite_utils.Database) -> None: ...

    def apply(self, conn: sqlite3.Connection, records: list[Recorded]) -> None: ...


class ProjectionRunner:
    """Keeps one projection's tables in step with the log of one store."""

    def __init__(
        self, store: EventStore, projection: Projection, *, batch_size: int = BATCH
    ) -> None:
        load_all()
        if not supports(projection, store):
            raise ProjectionError(
                f"projection {projection.name!r} runs on SQLite only; "
                "it is not available on PostgreSQL (docs/postgres.md)"
            )
        self.store = store
        self.projection = projection
        self.batch_size = batch_size
        self.position = 0
        self.error: ProjectionError | None = None
        self._moved = trio.Event()
        self._prepared = False

    @property
    def name(self) -> str:
        return self.projection.name

    # -- lifecycle ----------------------------------------------------------

    async def prepare(self) -> None:
        """Create or migrate the tables; start over from 0 if the version changed.
        On a store opened read-only, check instead that they are built for this
        version (`StoreReadOnly` if not: nothing can be made there)."""
        projection = self.projection
        if self.store.readonly:
            def built(conn: Any) -> tuple[int | None, int]:
                version = bookkeeping.built_version(conn, projection.name)
                return version, bookkeeping.tracked_position(conn, projection.name) if version else 0

            version, position = await self.store.read_sql(built)
            if version != projection.version:
                raise StoreReadOnly(f"{self._where} is read-only and its {projection.name!r} projection is"
                                    " not built for this gormes: open it once where it can be written")
            self._moved_to(position)
            self._prepared = True
            return

        def prepare(tx: Transaction) -> int:
            conn = tx.conn
            bookkeeping.ensure_tables(conn)
            built = bookkeeping.built_version(conn, projection.name)
            if built != projection.version:
                _reset(tx, projection)
            else:
                _setup(conn, projection)
            return bookkeeping.tracked_position(conn, projection.name)

        self._moved_to(await self.store.transact(prepare))
        self._prepared = True

    async def catch_up(self, upto: int | None = None, progress: Progress | None = None) -> int:
        """Apply every event up to `upto` (default: the head as it grows); return the position.

        Raises `ProjectionError` if a batch fails: that batch is undone, tracking
        stays where it was and the failure is recorded.
        """
        if not self._prepared:
            await self.prepare()
        if self.store.readonly:
            return await self._check_current(upto)
        self.error = None
        while True:
            page = await self._read(self.position, upto)
            if page.scanned <= page.after:
                return self.position
            position = await self._apply(page)
            if progress is not None:
                progress(position, page.head if upto is None else min(page.head, upto))

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Catch up, then follow the log until cancelled or until a batch fails."""
        await self.prepare()
        self.error = None
        task_status.started()
        store = self.store
        while True:
            generation = store.generation
            caught_up, _ = await self._step(None)
            if caught_up:
                await store.wait_for_change(generation)

    async def rebuild(self, upto: int | None = None, progress: Progress | None = None) -> int:
        """Drop the tables, reset tracking, set up afresh and apply the log from 0."""
        projection = self.projection

        def reset(tx: Transaction) -> None:
            bookkeeping.ensure_tables(tx.conn)
            _reset(tx, projection)

        await self.store.transact(reset)
        self.error = None
        self._moved_to(0)
        self._prepared = True
        return await self.catch_up(upto, progress)

    async def wait(self, position: int, timeout: float | None = None) -> bool:
        """Wait until the projection has applied `position`; False if `timeout` ran out.

        Needs this runner to be running (`run`) or catching up in another task.
        Raises the runner's `ProjectionError` if it stopped on a failed batch.
        """
        with trio.move_on_after(math.inf if timeout is None else timeout):
            while self.position < position:
                if self.error is not None:
                    raise self.error
                await self._moved.wait()
            return True
        return False

    # -- one batch ----------------------------------------------------------

    async def _check_current(self, upto: int | None) -> int:
        """On a store opened read-only nothing can be applied: the position, if no
        event the projection takes lies past it; `StoreReadOnly` if one does."""
        after = self.position
        while True:
            page = await self._read(after, upto)
            if page.records:
                raise StoreReadOnly(
                    f"{self._where} is read-only and its {self.projection.name!r} projection is behind the log"
                    f" (at position {self.position}, an event to apply at {page.records[0].position}):"
                    " read it once where it can be written, which catches the projection up"
                )
            if page.scanned <= page.after:
                return self.position
            after = page.scanned

    @property
    def _where(self) -> str:
        return str(getattr(self.store, "path", None) or getattr(self.store, "where", "the database"))

    async def _read(self, after: int, upto: int | None) -> _Page:
        if upto is not None and after >= upto:
            return _Page(after, [], after, after)
        limit = self.batch_size if upto is None else min(self.batch_size, upto - after)
        types = getattr(self.projection, "types", None)
        records, scanned, head = await self.store.read_page(after, limit, types)
        if upto is not None and scanned > upto:
            # `limit` counts rows, not positions: past a gap retention left, a page
            # of them reaches beyond `upto` (decision 0091).
            records = [r for r in records if r.position <= upto]
            scanned = upto
        return _Page(after, records, scanned, head)

    async def _step(self, upto: int | None) -> tuple[bool, int]:
        """Read and apply one page; (caught up, head)."""
        page = await self._read(self.position, upto)
        if page.scanned <= page.after:
            return True, page.head
        position = await self._apply(page)
        return position >= page.head, page.head

    async def _apply(self, page: _Page) -> int:
        """Apply a page and advance tracking in one transaction; the new position."""
        try:
            position = await self.store.transact(lambda tx: self._apply_batch(tx, page))
        except Exception as exc:
            error = await self._fail(page.after, page.scanned, exc)
            raise error from exc
        self._moved_to(position)
        return position

    def _apply_batch(self, tx: Transaction, page: _Page) -> int:
        """In the writer thread: apply and advance tracking, in one transaction."""
        current = bookkeeping.tracked_position(tx.conn, self.projection.name)
        if current != page.after:
            # Another runner (another process, a rebuild) moved it: resume from there
            # rather than apply these events a second time.
            return current
        _apply_in(tx, self.projection, page.records, page.scanned)
        return page.scanned

    async def _fail(self, after: int, scanned: int, exc: Exception) -> ProjectionError:
        """Record a failed batch where status and the doctor will see it; wake waiters."""
        projection = self.projection
        error = f"{type(exc).__name__}: {exc}"
        self.error = ProjectionError(
            f"projection {projection.name!r} failed on events {after + 1}..{scanned}: {error}"
        )
        self._wake()
        try:
            await self.store.transact(
                lambda tx: bookkeeping.record_failure(
                    tx.conn, projection.name, projection.version, after + 1, scanned, error,
                    tx.now,
                )
            )
        except GormesError:
            pass  # the store itself is failing (disk full, closed): the raise still surfaces it
        return self.error

    def _moved_to(self, position: int) -> None:
        self.position = position
        self._wake()

    def _wake(self) -> None:
        self._moved.set()
        self._moved = trio.Event()


def catch_up_in(tx: Transaction, projection: Projection) -> int:
    """Fold what the log holds past `projection`'s tracked position into its
    tables, inside `tx`; return the position. Under the transaction's write lock
    nothing can be appended meanwhile, so a read of the tables that follows sees
    the log exactly as the transaction's own appends will follow it (a check and
    the write it allows as one step). Its cost is what came since the last fold:
    catch the runner up first so that little is left."""
    types = getattr(projection, "types", None)
    position = bookkeeping.tracked_position(tx.conn, projection.name)
    while True:
        records, scanned = tx.read_page(position, BATCH, types)
        if scanned <= position:
            return position
        _apply_in(tx, projection, records, scanned)
        position = scanned


def _apply_in(tx: Transaction, projection: Projection, records: list[Recorded], scanned: int) -> None:
    conn = tx.conn
    if records:
        projection.apply(conn, records)
    bookkeeping.set_position(conn, projection.name, scanned)
    bookkeeping.resolve_failures(conn, projection.name, tx.now, applied_upto=scanned)


def _database(conn: sqlite3.Connection) -> sqlite_utils.Database:
    """sqlite-utils over the transaction's connection: its schema changes nest as savepoints."""
    import sqlite_utils

    return sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)


def _setup(conn: Any, projection: Projection) -> None:
    if dialect_of(conn) == POSTGRES:
        schema = schema_of(projection)
        assert schema is not None  # checked when the runner was made
        schema.create_postgres(conn)
    else:
        projection.setup(_database(conn))


def reset_in(tx: Transaction, projection: Projection) -> None:
    """Drop and set up `projection`'s tables and reset its tracking to 0, inside
    `tx` (a redaction's transaction): any runner then folds it again from 0."""
    _reset(tx, projection)


def _reset(tx: Transaction, projection: Projection) -> None:
    conn = tx.conn
    if dialect_of(conn) == POSTGRES:
        for table in projection.tables:
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
    else:
        db = _database(conn)
        for table in projection.tables:
            db.table(table).drop(ignore=True)
    _setup(conn, projection)
    bookkeeping.set_position(conn, projection.name, 0)
    bookkeeping.set_built_version(conn, projection.name, projection.version)
    bookkeeping.resolve_failures(conn, projection.name, tx.now)
