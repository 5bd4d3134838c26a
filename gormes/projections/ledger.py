"""The `ledger` projection: the job queue's index (jobs, inbox, capped transcript).

It runs INLINE: `install` adds `inline_apply` to the store's write transactions,
so the ledger is exactly current with every append and a claim reads it under
the same write lock that appends the claim. `inline_apply` also keeps the
`tracking` row, and first applies any events it missed (written by a process
without the ledger installed), so the ledger never skips an event.

`LEDGER` also has the shape of the projection runner's `Projection` (name,
version, tables, setup, apply), so `ProjectionRunner(store, LEDGER).rebuild()`
rebuilds it and maintenance can check it. `apply` is deterministic in the records
alone: every value comes from the events (times included), never from a clock.

Both stores run the same ledger: on SQLite the tables are created with
sqlite-utils on a separate connection (`setup_file`), outside any write
transaction; on PostgreSQL with plain DDL inside the writer's transaction
(gormes/projections/ledger_postgres.py, from the same `TABLES` and `INDEXES`).
Rows are written with one SQL text for both, with `?` placeholders (a
PortableConnection runs it on PostgreSQL); the few spellings that differ are
the `Dialect` fragments below.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from gormes.events.base import Recorded
from gormes.events.codec import default_codec
from gormes.events.postgres_sql import POSTGRES, dialect_of
from gormes.events.jobs import (
    JobAwaitingChildren, JobCancelled, JobChildAdded, JobChildDone, JobChildrenSettled,
    JobClaimed, JobCompleted, JobFailed, JobInboxRead, JobLeaseRenewed, JobMessageSent,
    JobPaused, JobProgressed, JobPromoted, JobPruned, JobReleased, JobResumed, JobRetried,
    JobStalled, JobSubmitted, JobTimedOut, JobTokensAdded, JobTranscribed,
)

NAME = "ledger"
# 2: jobs.submitter (who submitted the job, JSON). A version-1 ledger is migrated
# by adding the column: its rows stay exact, as no version-1 event has a submitter.
VERSION = 2
TRANSCRIPT_CAP = 200  # entries kept per job in the ledger; the log keeps all
STALLED_ERROR = "max stalled count exceeded"

_json = msgspec.json.Encoder()


def _enc(value: Any) -> str | None:
    return None if value is None else _json.encode(value).decode()


def submitter_json(submitter: Any) -> str:
    """The `jobs.submitter` text of a Submitter ("" for None, which the column holds
    as NULL: compare with `coalesce(submitter, '')`)."""
    return _enc(submitter) or ""


def _jobs_columns() -> dict[str, type]:
    return {
        "id": str, "name": str, "queue": str, "status": str, "priority": int,
        "data": str, "result": str, "error": str,
        "attempts_made": int, "attempts_started": int, "stalled_counter": int,
        "max_attempts": int, "max_stalled": int, "timeout_ms": int,
        "parent_id": str, "depth": int, "live_children": int, "progress": str,
        "tokens_input": int, "tokens_output": int, "tokens_cache_read": int,
        "created_at": int, "started_at": int, "finished_at": int, "claimed_at": int,
        "lock_token": str, "lock_until": int, "lease_ms": int, "worker_id": str,
        "delay_until": int, "idempotency_key": str, "options": str, "version": int,
        "updated_at": int, "submitter": str,
    }


class Table(NamedTuple):
    """One ledger table, described once for both databases (sqlite-utils builds it
    on SQLite, gormes/projections/ledger_postgres.py on PostgreSQL)."""

    name: str
    columns: dict[str, type]
    pk: str | tuple[str, ...]
    not_null: frozenset[str] = frozenset()
    defaults: dict[str, Any] = {}


TABLES = (
    Table(
        "jobs", _jobs_columns(), "id",
        frozenset({"name", "queue", "status", "priority", "created_at"}),
        {
            "attempts_made": 0, "attempts_started": 0, "stalled_counter": 0, "depth": 0,
            "live_children": 0, "tokens_input": 0, "tokens_output": 0, "tokens_cache_read": 0,
        },
    ),
    Table(
        "inbox",
        {"id": str, "job_id": str, "sender": str, "payload": str, "sent_at": int, "read_at": int},
        "id", frozenset({"job_id", "sender", "sent_at"}),
    ),
    Table(
        "transcript",
        {"job_id": str, "seq": int, "kind": str, "text": str, "data": str, "at": int},
        ("job_id", "seq"),
    ),
)

class LedgerIndex(NamedTuple):
    """One ledger index; `where` makes it partial (the same SQL on both databases)."""

    name: str
    table: str
    columns: tuple[str, ...]
    where: str | None = None


def index_sql(index: LedgerIndex) -> str:
    sql = f"CREATE INDEX IF NOT EXISTS {index.name} ON {index.table}({', '.join(index.columns)})"
    return sql if index.where is None else f"{sql} WHERE {index.where}"


# A job changes status at every transition, and each index holding its status
# costs that transition a delete and an insert: the indexes that serve one status
# are partial (decision 0012), so a claim leaves `jobs_waiting` and a completion
# touches neither it nor `jobs_delayed`.
INDEXES = (
    # The claim order (priority, then age) of waiting jobs, covering the name and
    # queue filters: a claim walks it in order and stops at its LIMIT, no sort.
    # (`status` leads so that SQLite, without statistics, prefers it to
    # `jobs_status` for the claim's `status = 'waiting'`.)
    LedgerIndex(
        "jobs_waiting", "jobs", ("status", "priority", "created_at", "id", "name", "queue"),
        "status = 'waiting'",
    ),
    LedgerIndex("jobs_delayed", "jobs", ("status", "delay_until"), "status = 'delayed'"),
    # Every status: the sweeps (active, waiting-children), prune and the read
    # side's counts by queue and status, and recent finishes per queue.
    LedgerIndex("jobs_status", "jobs", ("status", "queue", "finished_at")),
    LedgerIndex("jobs_parent", "jobs", ("parent_id",)),
    LedgerIndex("jobs_idem", "jobs", ("idempotency_key",)),
    LedgerIndex("inbox_job", "inbox", ("job_id", "sent_at")),
)
# Indexes of earlier versions, dropped where found (decision 0012).
RETIRED_INDEXES = ("jobs_claim", "jobs_pick", "jobs_delay", "jobs_lock", "jobs_done")


def setup(db: Any) -> None:
    """Create the tables and indexes if missing, add the columns a table of an
    earlier version lacks, and drop retired indexes (a `sqlite_utils.Database`)."""
    for table in TABLES:
        db[table.name].create(
            table.columns, pk=table.pk, if_not_exists=True,
            not_null=set(table.not_null) or None, defaults=table.defaults or None,
        )
        have = set(db[table.name].columns_dict)
        for column, type_ in table.columns.items():
            if column not in have:  # nullable, no default: see VERSION
                db[table.name].add_column(column, type_)
    for index in INDEXES:
        db.execute(index_sql(index))
    for name in RETIRED_INDEXES:
        db.execute(f"DROP INDEX IF EXISTS {name}")


# Every schema object `setup` and the bookkeeping create: when all exist (and the
# built version is recorded) there is nothing to set up. A name missing from this
# list only means the full setup runs again, which is idempotent.
_SCHEMA = (
    *(t.name for t in TABLES), *(index.name for index in INDEXES),
    "projection_versions", "projection_failures", "idx_projection_failures_projection_resolved_at",
)


def _set_up_already(conn: sqlite3.Connection) -> bool:
    from gormes.projections import bookkeeping

    names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    return (
        names.issuperset(_SCHEMA) and names.isdisjoint(RETIRED_INDEXES)
        and bookkeeping.built_version(conn, NAME) == VERSION
    )


def setup_file(path: str | Path) -> None:
    """Create the ledger's tables on a connection of their own (blocking).

    On a database that has them all already this is two reads (a worker starts
    faster: sqlite-utils is not even imported)."""
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    try:
        if _set_up_already(conn):
            return
        import sqlite_utils

        from gormes.projections import bookkeeping

        for attempt in range(50):
            try:
                db = sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
                setup(db)
                bookkeeping.ensure_tables(conn)
                if bookkeeping.built_version(conn, NAME) != VERSION:
                    bookkeeping.set_built_version(conn, NAME, VERSION)
                return
            except sqlite3.OperationalError as exc:
                # sqlite-utils reads the schema, then writes: if another process
                # committed in between, SQLite answers "locked" at once instead of
                # waiting (a stale WAL snapshot). Every step is idempotent: go again.
                if "locked" not in str(exc) or attempt == 49:
                    raise
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                time.sleep(0.01 * (attempt + 1))
    finally:
        conn.close()


# -- applying events -------------------------------------------------------------


def _delete_job(conn: Any, job_id: str) -> None:
    conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
    conn.execute("DELETE FROM inbox WHERE job_id = ?", (job_id,))
    conn.execute("DELETE FROM transcript WHERE job_id = ?", (job_id,))


_UNLOCK = "lock_token = NULL, lock_until = NULL, lease_ms = NULL, worker_id = NULL"
_REQUEUE = "status = CASE WHEN status = 'waiting-children' THEN status ELSE 'waiting' END"


class Dialect(NamedTuple):
    """The few pieces of ledger SQL that SQLite and PostgreSQL spell differently;
    everything else is one text (run on PostgreSQL through a PortableConnection,
    gormes/events/postgres_sql.py)."""

    option: str  # the option named by the parameter, true when set (one row per job)
    option_key: str  # how the parameter names it ({key})
    not_option_remove_on_complete: str  # a WHERE term over the jobs row
    live_children_less_one: str  # live_children - 1, never below 0
    job_types: str  # the event types the ledger folds
    # JobCompleted as one statement that reads back nothing (None: the UPDATE,
    # then the option when it updated no row): the PostgreSQL store sends the
    # ledger's statements in a pipeline, where reading a rowcount is a round trip.
    # Parameters: job id, result, finished_at, updated_at, version.
    complete: str | None = None


SQLITE_DIALECT = Dialect(
    option="SELECT json_extract(options, ?) FROM jobs WHERE id = ?",
    option_key="$.{key}",
    not_option_remove_on_complete="NOT coalesce(json_extract(options, '$.remove_on_complete'), 0)",
    live_children_less_one="max(live_children - 1, 0)",
    job_types="type GLOB 'job.*'",
)
POSTGRES_DIALECT = Dialect(
    option="SELECT coalesce((options::jsonb ->> CAST(? AS text))::boolean, false)"
    " FROM jobs WHERE id = ?",
    option_key="{key}",
    not_option_remove_on_complete=(
        "NOT coalesce((options::jsonb ->> 'remove_on_complete')::boolean, false)"
    ),
    live_children_less_one="greatest(live_children - 1, 0)",
    job_types="type LIKE 'job.%'",
    complete=(
        "WITH j AS (SELECT id, coalesce((options::jsonb ->> 'remove_on_complete')::boolean,"
        " false) AS remove FROM jobs WHERE id = ?),"
        " u AS (UPDATE jobs SET status = 'completed', result = ?, finished_at = ?,"
        f" attempts_made = attempts_made + 1, {_UNLOCK}, updated_at = ?, version = ?"
        " FROM j WHERE jobs.id = j.id AND NOT j.remove),"
        " i AS (DELETE FROM inbox USING j WHERE inbox.job_id = j.id AND j.remove),"
        " t AS (DELETE FROM transcript USING j WHERE transcript.job_id = j.id AND j.remove)"
        " DELETE FROM jobs USING j WHERE jobs.id = j.id AND j.remove"
    ),
)


def dialect(conn: Any) -> Dialect:
    return POSTGRES_DIALECT if dialect_of(conn) == POSTGRES else SQLITE_DIALECT


def apply_one(conn: Any, rec: Recorded, d: Dialect | None = None) -> None:  # noqa: C901 - one dispatch
    """Fold one `job-*` event into the ledger. `conn` is an sqlite3 connection or a
    PortableConnection (PostgreSQL); `d` its dialect (looked up when not given)."""
    e = rec.event
    job_id = rec.stream[4:]
    x = conn.execute
    d = d or dialect(conn)

    def update(sets: str, *params: Any) -> None:
        x(f"UPDATE jobs SET {sets}, version = ? WHERE id = ?", (*params, rec.version, job_id))

    if isinstance(e, JobSubmitted):
        o = e.options
        x(
            "INSERT INTO jobs(id, name, queue, status, priority, data, max_attempts, max_stalled,"
            " timeout_ms, parent_id, depth, created_at, delay_until, idempotency_key, options,"
            " version, updated_at, submitter) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                e.job_id, e.name, o.queue, "delayed" if e.delay_until is not None else "waiting",
                o.priority, _enc(e.data), o.max_attempts, o.max_stalled, o.timeout_ms,
                o.parent_id, e.depth, e.created_at, e.delay_until, o.idempotency_key,
                _enc(o), rec.version, e.created_at, _enc(e.submitter),
            ),
        )
    elif isinstance(e, JobClaimed):
        x(_CLAIMED, _claimed_params(rec, e))
    elif isinstance(e, JobLeaseRenewed):
        update("lock_until = ?", e.lock_until)
    elif isinstance(e, JobCompleted) and d.complete is not None:
        x(d.complete, (job_id, _enc(e.result), e.at, e.at, rec.version))
    elif isinstance(e, JobCompleted):
        # One statement in the common case: the row is updated unless the job asked
        # to be removed on completion; only then is the option read again.
        updated = x(_completed_sql(d), _completed_params(rec, e)).rowcount
        if not updated and _option(conn, job_id, "remove_on_complete"):
            _delete_job(conn, job_id)
    elif isinstance(e, JobAwaitingChildren):
        update(f"status = 'waiting-children', {_UNLOCK}, updated_at = ?", e.at)
    elif isinstance(e, JobFailed):
        if e.status != "delayed" and _option(conn, job_id, "remove_on_fail"):
            _delete_job(conn, job_id)
            return
        update(
            f"status = ?, error = ?, attempts_made = attempts_made + ?, delay_until = ?,"
            f" finished_at = ?, {_UNLOCK}, updated_at = ?",
            e.status, e.error, 1 if e.attempt_consumed else 0, e.delay_until,
            None if e.status == "delayed" else e.at, e.at,
        )
    elif isinstance(e, JobStalled):
        if e.dead:
            if _option(conn, job_id, "remove_on_fail"):
                _delete_job(conn, job_id)
                return
            update(
                f"status = 'dead', error = ?, finished_at = ?, stalled_counter = stalled_counter + 1,"
                f" attempts_made = attempts_made + 1, {_UNLOCK}, updated_at = ?",
                STALLED_ERROR, e.at, e.at,
            )
        else:
            update(f"{_REQUEUE}, stalled_counter = stalled_counter + 1, {_UNLOCK}, updated_at = ?", e.at)
    elif isinstance(e, JobTimedOut):
        if _option(conn, job_id, "remove_on_fail"):
            _delete_job(conn, job_id)
            return
        update(
            f"status = 'dead', error = ?, finished_at = ?, attempts_made = attempts_made + 1,"
            f" {_UNLOCK}, updated_at = ?", e.error, e.at, e.at,
        )
    elif isinstance(e, JobReleased):
        update(f"{_REQUEUE}, {_UNLOCK}, updated_at = ?", e.at)
    elif isinstance(e, JobPromoted):
        update("status = 'waiting', delay_until = NULL, updated_at = ?", e.at)
    elif isinstance(e, JobPaused):
        update(f"status = 'paused', {_UNLOCK}, updated_at = ?", e.at)
    elif isinstance(e, JobResumed):
        update("status = 'waiting', updated_at = ?", e.at)
    elif isinstance(e, JobCancelled):
        update(f"status = 'cancelled', error = ?, finished_at = ?, {_UNLOCK}, updated_at = ?",
               e.reason, e.at, e.at)
    elif isinstance(e, JobRetried):
        update(
            f"status = 'waiting', attempts_made = 0, error = NULL, started_at = NULL,"
            f" stalled_counter = 0, finished_at = NULL, result = NULL, delay_until = NULL,"
            f" {_UNLOCK}, updated_at = ?", e.at,
        )
    elif isinstance(e, JobPruned):
        _delete_job(conn, job_id)
    elif isinstance(e, JobProgressed):
        update("progress = ?, updated_at = ?", _enc(e.progress), e.at)
    elif isinstance(e, JobTokensAdded):
        t = e.tokens
        update(
            "tokens_input = tokens_input + ?, tokens_output = tokens_output + ?,"
            " tokens_cache_read = tokens_cache_read + ?", t.input, t.output, t.cache_read,
        )
    elif isinstance(e, JobTranscribed):
        x(
            "INSERT INTO transcript(job_id, seq, kind, text, data, at) VALUES (?,?,?,?,?,?)",
            (job_id, rec.version, e.entry.kind, e.entry.text, _enc(e.entry.data), e.at),
        )
        x(
            "DELETE FROM transcript WHERE job_id = ? AND seq <= coalesce((SELECT seq FROM"
            " transcript WHERE job_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?), -1)",
            (job_id, job_id, TRANSCRIPT_CAP),
        )
    elif isinstance(e, JobChildAdded):
        update(
            "live_children = live_children + 1, status = CASE WHEN status IN"
            " ('waiting', 'delayed', 'active') THEN 'waiting-children' ELSE status END,"
            " updated_at = ?", e.at,
        )
    elif isinstance(e, JobMessageSent):
        x(
            "INSERT INTO inbox(id, job_id, sender, payload, sent_at) VALUES (?,?,?,?,?)",
            (e.message_id, job_id, e.sender, _enc(e.payload), e.at),
        )
    elif isinstance(e, JobChildDone):
        payload = {
            "type": "child_done", "child_id": e.child_id, "outcome": e.outcome,
            "result": e.result, "error": e.error,
        }
        x(
            "INSERT INTO inbox(id, job_id, sender, payload, sent_at) VALUES (?,?,?,?,?)",
            (e.message_id, job_id, f"child:{e.child_id}", _enc(payload), e.at),
        )
        update(f"live_children = {d.live_children_less_one}, updated_at = ?", e.at)
    elif isinstance(e, JobChildrenSettled):
        update(
            "status = CASE WHEN lock_token IS NOT NULL THEN 'active' ELSE 'waiting' END,"
            " updated_at = ?", e.at,
        )
    elif isinstance(e, JobInboxRead):
        marks = ",".join("?" * len(e.message_ids))
        x(
            f"UPDATE inbox SET read_at = ? WHERE job_id = ? AND read_at IS NULL AND id IN ({marks})",
            (e.at, job_id, *e.message_ids),
        )


def _option(conn: Any, job_id: str, key: str) -> bool:
    d = dialect(conn)
    row = conn.execute(d.option, (d.option_key.format(key=key), job_id)).fetchone()
    return bool(row and row[0])


_CLAIMED = (
    "UPDATE jobs SET status = 'active', attempts_started = attempts_started + 1,"
    " started_at = coalesce(started_at, ?), claimed_at = ?, lock_token = ?,"
    " lock_until = ?, lease_ms = ?, worker_id = ?, delay_until = NULL, updated_at = ?,"
    " version = ? WHERE id = ?"
)


def _claimed_params(rec: Recorded, e: JobClaimed) -> tuple[Any, ...]:
    return (
        e.at, e.at, e.lock_token, e.lock_until, e.lease_ms, e.worker_id, e.at,
        rec.version, rec.stream[4:],
    )


def _completed_sql(d: Dialect) -> str:
    return (
        f"UPDATE jobs SET status = 'completed', result = ?, finished_at = ?,"
        f" attempts_made = attempts_made + 1, {_UNLOCK}, updated_at = ?, version = ?"
        f" WHERE id = ? AND {d.not_option_remove_on_complete}"
    )


def _completed_params(rec: Recorded, e: JobCompleted) -> tuple[Any, ...]:
    return (_enc(e.result), e.at, e.at, rec.version, rec.stream[4:])


_SQLITE_COMPLETED = _completed_sql(SQLITE_DIALECT)


def apply(conn: Any, records: Sequence[Recorded]) -> None:
    """Fold a batch of events into the ledger (ignores everything but `job-*`).

    On SQLite a run of claims, or of completions, one after the other (a worker's
    round) is written with one `executemany` each: the same statements, in the
    same order, as `apply_one` would run for them one by one."""
    d = dialect(conn)
    if d is not SQLITE_DIALECT:
        for rec in records:
            if rec.type.startswith("job.") and rec.stream.startswith("job-"):
                apply_one(conn, rec, d)
        return
    run_type: type | None = None
    run: list[tuple[Any, ...]] = []
    for rec in records:
        if not (rec.type.startswith("job.") and rec.stream.startswith("job-")):
            continue
        e = rec.event
        kind = type(e)
        if kind is not run_type and run:
            _apply_run(conn, run_type, run)
            run = []
        if kind is JobClaimed:
            run_type = kind
            run.append(_claimed_params(rec, e))
        elif kind is JobCompleted:
            run_type = kind
            run.append(_completed_params(rec, e))
        else:
            run_type = None
            apply_one(conn, rec, d)
    if run:
        _apply_run(conn, run_type, run)


def _apply_run(conn: Any, kind: type | None, run: list[tuple[Any, ...]]) -> None:
    if kind is JobClaimed:
        conn.executemany(_CLAIMED, run)
        return
    # Completions: a row left as it was asked to be removed on completion (or is
    # not in the ledger): as `apply_one`, only then is the option read.
    if conn.executemany(_SQLITE_COMPLETED, run).rowcount == len(run):
        return
    for params in run:
        job_id = params[4]
        if _option(conn, job_id, "remove_on_complete"):
            _delete_job(conn, job_id)


# -- inline application and tracking ----------------------------------------------

_SELECT = (
    "SELECT position, stream, version, type, type_version, data, recorded_at FROM events"
    " WHERE position > ? AND position < ? AND {job_types} ORDER BY position"
)


def _tracked(conn: Any) -> int:
    row = conn.execute("SELECT position FROM tracking WHERE projection = ?", (NAME,)).fetchone()
    return row[0] if row else 0


def _track(conn: Any, position: int) -> None:
    conn.execute(
        "INSERT INTO tracking(projection, position) VALUES (?, ?) "
        "ON CONFLICT(projection) DO UPDATE SET position = excluded.position",
        (NAME, position),
    )


def catch_up(conn: Any, before: int | None = None) -> int:
    """Apply every event after the tracked position (and before `before`); returns
    the new tracked position. Call inside a write transaction."""
    after = _tracked(conn)
    if before is None:
        before = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0] + 1
    if before - 1 <= after:
        return after
    decode = default_codec.decode
    d = dialect(conn)
    select = _SELECT.format(job_types=d.job_types)
    for pos, stream, version, type_, tv, data, at in conn.execute(select, (after, before)).fetchall():
        if stream.startswith("job-"):
            apply_one(conn, Recorded(pos, stream, version, type_, decode(type_, tv, data), at), d)
    _track(conn, before - 1)
    return before - 1


def inline_apply(conn: Any, records: list[Recorded]) -> None:
    """The store's inline hook: apply a just-inserted batch, exactly once, in order."""
    if not records:
        return
    tracked = _tracked(conn)
    first = records[0].position
    if first > tracked + 1:
        catch_up(conn, before=first)
        tracked = first - 1
    apply(conn, [r for r in records if r.position > tracked])
    _track(conn, max(tracked, records[-1].position))


def reset(conn: Any) -> None:
    """Empty the ledger and its tracking (a rebuild then catches up from 0)."""
    for table in ("jobs", "inbox", "transcript"):
        conn.execute(f"DELETE FROM {table}")
    _track(conn, 0)


async def install(store: Any) -> None:
    """Create the tables, catch up with the log and make the ledger inline on
    `store` (an SQLiteEventStore or a PostgresEventStore). Idempotent."""
    import trio

    if dialect_of(store) == POSTGRES:
        from gormes.projections import ledger_postgres

        # DDL is transactional on PostgreSQL: the tables are made in the writer's
        # transaction, under its table lock, so hosts starting together take turns.
        def attach_pg(tx: Any) -> int:
            ledger_postgres.set_up(tx.conn, NAME, VERSION)
            tx.execute("SELECT 1")  # flush anything staged before us in this batch
            position = catch_up(tx.conn)
            if inline_apply not in store.inline:
                store.inline.append(inline_apply)
            return position

        await store.transact(attach_pg)
        return

    # SQLite: sqlite-utils reads the schema on a connection of its own, outside any
    # write transaction.
    await trio.to_thread.run_sync(setup_file, store.path)

    def attach(tx: Any) -> int:
        tx.execute("SELECT 1")  # flush anything staged before us in this batch
        position = catch_up(tx.conn)
        if inline_apply not in store.log.inline:
            store.log.inline.append(inline_apply)
        return position

    await store.transact(attach)


async def rebuild(store: Any) -> int:
    """Empty the ledger and fold the whole log again, in one transaction."""

    def run(tx: Any) -> int:
        tx.execute("SELECT 1")
        reset(tx.conn)
        return catch_up(tx.conn)

    return await store.transact(run)


class LedgerProjection:
    """The ledger in the projection runner's shape."""

    name = NAME
    version = VERSION
    tables = ("jobs", "inbox", "transcript")
    types = ("job.*",)

    def setup(self, db: Any) -> None:
        setup(db)

    def apply(self, conn: Any, records: list[Recorded]) -> None:
        apply(conn, records)


LEDGER = LedgerProjection()
