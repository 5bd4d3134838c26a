"""The `ledger` projection: the job queue's index (jobs, inbox, capped transcript).

It runs INLINE: `install` adds `inline_apply` to the store's write transactions,
so the ledger is exactly current with every append and a claim reads it under
the same write lock that appends the claim. `inline_apply` also keeps the
`tracking` row, and first applies any events it missed (written by a process
without the ledger installed), so the ledger never skips an event.

What each event does to its job's row is not written here: the UPDATEs are
compiled from the job state machine's table (gormes/events/job_machine.py, the
one `evolve` folds) by gormes/projections/ledger_sql.py; what the table does not
say (a job's first row, removals, the live-children count, the inbox and the
transcript) is the code below.

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
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import msgspec

from gormes.errors import StoreReadOnly
from gormes.events.base import Recorded
from gormes.events.codec import default_codec
from gormes.events.job_machine import ALWAYS, STALLED_ERROR, STALLED_ERROR_BEFORE, Transition, transition_of
from gormes.events.jobs import (
    STATUSES, TERMINAL, JobChildAdded, JobChildDone, JobInboxRead, JobMessageSent, JobOptions,
    JobSubmitted, JobTokensAdded, JobTranscribed,
)
from gormes.events.postgres_sql import POSTGRES, SQLITE, dialect_of
from gormes.events.sql_fragments import glob, json_text_in
from gormes.events.store import EventStore, Transaction
from gormes.projections import ledger_tokens
from gormes.projections.ledger_sql import Spelling, Write, compile_writes, encode_json

if TYPE_CHECKING:
    from gormes.events.sqlite import SQLiteEventStore

NAME = "ledger"
# 2: jobs.submitter (who submitted the job, JSON). A version-1 ledger is migrated
# by adding the column: its rows stay exact, as no version-1 event has a submitter.
# (A removed job's later inbox and transcript entries are not written, since
# decision 0023; still 2: the queue writes no such log, as a retry of or a message
# to a removed job is refused, so no ledger built before differs from its rebuild.)
# 3: a job dead of stalls says "max stalled count reached" (it was "exceeded": the
# count is reached when the job dies). A version-2 ledger's rows are reworded in
# place, so that it stays identical to its rebuild.
# 4: jobs.concurrency_key, concurrency_limit, debounce_key and submissions (per-key
# concurrency and debounce, decision 0032). The columns are added; no earlier event
# has a key, so the keys stay NULL as a rebuild leaves them, and `submissions` is
# set to 1 (`BACKFILL_SUBMISSIONS`), what a rebuild writes for a job never coalesced.
# 5: jobs.tokens_cache_write and tokens_reasoning (Tokens' new kinds), and the token
# tables `job_model_tokens` and `model_tokens` (spent and wasted per model,
# gormes/projections/ledger_tokens.py; decision 0035). No earlier event has the new
# kinds, but the token tables need every job event again (an attempt's waste reads
# the job's row as it was then): a version-4 ledger is emptied and folded again
# from position 0 when first opened (`reset`, then the usual catch-up), which is
# exactly what a rebuild writes, on both backends.
# 6: jobs.options holds only the options that differ from JobOptions' defaults
# (`{}` for a job submitted with none, whose 450 bytes of JSON become 2;
# `options_json`): every claim's and completion's UPDATE rewrites a smaller row
# and a commit writes fewer pages (decision 0051). A version-5 ledger, which held every option,
# is emptied and folded again from position 0 when first opened, as for 5. A
# default of JobOptions that changes needs a new version: the rows leave it out.
VERSION = 6
TRANSCRIPT_CAP = 200  # entries kept per job in the ledger; the log keeps all

_enc = encode_json
_DEFAULT_OPTIONS = msgspec.to_builtins(JobOptions())
_ABSENT = object()


def options_json(options: JobOptions) -> str:
    """The `jobs.options` text: the options that differ from their defaults, as a
    JSON object (`{}` for none). Decoded as JobOptions it gives `options` back,
    and an option left out reads as NULL in SQL (`coalesce` gives its default)."""
    given = msgspec.to_builtins(options)
    return msgspec.json.encode({k: v for k, v in given.items() if _DEFAULT_OPTIONS.get(k, _ABSENT) != v}).decode()


def status_in(statuses: Iterable[str], *, negate: bool = False) -> str:
    """The SQL test that a job's status is one of `statuses` (`negate`: is none of
    them): `status = 'a'` for one (what a partial index's `WHERE` says, so the
    planner can use it), `status IN ('a', 'b')` sorted for several, so one set is
    always one SQL text. For the sets of gormes/events/job_machine.py (`LIVE`,
    `HELD`, `CLAIMABLE`, ...): constants, never input, but each is checked to be a
    job status before it is quoted."""
    names = sorted(set(statuses))
    if not names or not set(names) <= set(STATUSES):
        raise ValueError(f"not a set of job statuses: {names}")
    if len(names) == 1:
        return f"status {'!=' if negate else '='} '{names[0]}'"
    listed = ", ".join(f"'{name}'" for name in names)
    return f"status {'NOT IN' if negate else 'IN'} ({listed})"


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
        "concurrency_key": str, "concurrency_limit": int, "debounce_key": str, "submissions": int,
        # last, as a migrated table has them (version 5): a rebuild's columns are in this order
        "tokens_cache_write": int, "tokens_reasoning": int,
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
            "tokens_cache_write": 0, "tokens_reasoning": 0,
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
    # What each job spent and wasted per model, and every model's totals
    # (gormes/projections/ledger_tokens.py).
    Table(
        ledger_tokens.JOB_TABLE, ledger_tokens.job_columns(), ("job_id", "model"),
        frozenset({"job_id", "model"}), ledger_tokens.zero_defaults(ledger_tokens.job_columns()),
    ),
    Table(
        ledger_tokens.TOTALS_TABLE, ledger_tokens.totals_columns(), "model",
        frozenset({"model"}), ledger_tokens.zero_defaults(ledger_tokens.totals_columns()),
    ),
)

# A job not yet ended, as the partial index `jobs_unended` says it. Not `status NOT
# IN (...)`: SQLite builds the IN list's lookup table each time it tests a row, and
# it tests the old and the new row of every UPDATE of `status`, so that spelling
# cost every claim and every completion ~13 us (half their UPDATE's CPU).
LIVE_JOBS = " AND ".join(f"status <> '{t}'" for t in sorted(TERMINAL))
BREAKER_ERROR = "circuit breaker: memory pressure"  # as gormes/actors/jobs/governor.py records it
BREAKER_KILLED = f"error = '{BREAKER_ERROR}'"

# The trust classes whose live jobs are not capped: gormes/tools/job_trust.py's
# PRIVILEGED (the operator and the system). Every other class's are, and their live
# jobs are indexed by class (`jobs_capped_live`), so that a class's count reads its
# own entries only. (Should the two lists part, the count stays exact: a class named
# here is counted from the table, `JobQueue.live_count_in`; one left out only puts
# its jobs in the index.)
UNCAPPED = ("operator", "system")
# In an index's SQL, the trust class and the scope a job's submitter records
# (`submitter_trust`, `submitter_scope`).
TRUST = "$trust"
SCOPE = "$scope"


def submitter_trust(dialect_name: str) -> str:
    """The trust class a job's `submitter` records, as the `dialect_name` database
    reads it out of the JSON (NULL for a job submitted without one)."""
    return json_text_in(dialect_name, "$.trust", "submitter")


def submitter_scope(dialect_name: str) -> str:
    """The scope a job's `submitter` records (NULL for none, or no submitter)."""
    return json_text_in(dialect_name, "$.scope", "submitter")


def _spelt(sql: str, dialect_name: str) -> str:
    return sql.replace(TRUST, submitter_trust(dialect_name)).replace(SCOPE, submitter_scope(dialect_name))


# The jobs of the capped classes, ended or not: `jobs_capped_owned`'s WHERE.
CAPPED = " AND ".join(f"{TRUST} <> '{name}'" for name in UNCAPPED)
# The live jobs of the capped classes: `jobs_capped_live`'s WHERE. Its status
# tests come first: an UPDATE of a job's status tests the old row and the new
# against it, and an ended job fails it before its submitter's JSON is read.
CAPPED_LIVE = " AND ".join([LIVE_JOBS, CAPPED])


def capped(dialect_name: str) -> str:
    """`CAPPED` as a query on the `dialect_name` database must say it, term for term,
    for the database to read an owner's jobs from `jobs_capped_owned`."""
    return _spelt(CAPPED, dialect_name)


def capped_live(dialect_name: str) -> str:
    """`CAPPED_LIVE` as a query on the `dialect_name` database must say it, term for
    term, for the database to read a class's count from `jobs_capped_live` (SQLite
    uses a partial index only for a query whose WHERE holds its WHERE's terms)."""
    return _spelt(CAPPED_LIVE, dialect_name)


class LedgerIndex(NamedTuple):
    """One ledger index; `where` makes it partial (the same SQL on both databases,
    but for `TRUST`, which `index_sql` spells as each reads the JSON)."""

    name: str
    table: str
    columns: tuple[str, ...]
    where: str | None = None


def index_sql(index: LedgerIndex, dialect_name: str = SQLITE) -> str:
    """`index`'s DDL for the `dialect_name` database (`TRUST` and `SCOPE` spelt as it
    reads them)."""
    sql = f"CREATE INDEX IF NOT EXISTS {index.name} ON {index.table}({', '.join(index.columns)})"
    sql = sql if index.where is None else f"{sql} WHERE {index.where}"
    return _spelt(sql, dialect_name)


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
    # `jobs list`'s order (newest first): walked backwards, it stops at the LIMIT
    # instead of sorting the whole ledger. Neither column changes after the insert,
    # so no transition pays for it.
    LedgerIndex("jobs_created", "jobs", ("created_at", "id")),
    LedgerIndex("jobs_idem", "jobs", ("idempotency_key",)),
    # Per-key concurrency (decision 0032): the jobs of a key that a worker holds (a
    # lock token is set exactly while one does). Only keyed jobs are in it, and only
    # while held, so a claim's count of a key reads that many entries, and a job
    # without a key costs nothing at any transition.
    LedgerIndex(
        "jobs_key_held", "jobs", ("concurrency_key",),
        "concurrency_key IS NOT NULL AND lock_token IS NOT NULL",
    ),
    # Debounce: the debounced jobs still delayed, by key (a submission finds the
    # one it joins, if any, in its key's few entries).
    LedgerIndex(
        "jobs_debounce", "jobs", ("debounce_key", "name"),
        "status = 'delayed' AND debounce_key IS NOT NULL",
    ),
    # `top`'s live jobs, newest first: only jobs not yet ended are in it (a job
    # leaves it once, when it ends), so a drained ledger of any size costs nothing
    # to walk. `LIVE_JOBS` is its WHERE, literally: SQLite uses a partial index
    # only for a query whose WHERE says the same (bound parameters do not).
    LedgerIndex("jobs_unended", "jobs", ("created_at", "id"), LIVE_JOBS),
    # The memory governor's breaker kills, counted by `top`: few, whatever the size.
    LedgerIndex("jobs_breaker", "jobs", ("id",), BREAKER_KILLED),
    # The live jobs of the capped classes (a gateway's, a child agent's) by class:
    # the count of the live-jobs cap, made under the write lock at each of their
    # submits, reads its class's entries and no other job's (decision 0070's
    # addendum). The operator's and the system's jobs, and jobs with no submitter,
    # never enter it; of a job's transitions only those that change its status test
    # it (a lease renewal, a token count, progress do not).
    LedgerIndex("jobs_capped_live", "jobs", (TRUST,), CAPPED_LIVE),
    # The jobs of the capped classes by owner (scope, trust), oldest to newest: a
    # gateway's or child agent's `job.list` is a range of its own entries, walked
    # in order from its cursor, and reads no one else's job (decision 0076's
    # addendum). The scope leads, so that a count by class alone (the live-jobs
    # cap's, which has no scope) is not offered it and reads `jobs_capped_live`.
    # None of its columns changes after the insert: no transition touches it, only
    # a job's insert and its removal.
    LedgerIndex("jobs_capped_owned", "jobs", (SCOPE, TRUST, "created_at", "id"), CAPPED),
    # A job's inbox in the order it is read (sent, then id): a page from a cursor
    # is a range of it (decision 0076's addendum; it was `inbox_job`, without `id`).
    LedgerIndex("inbox_order", "inbox", ("job_id", "sent_at", "id")),
)
# A version-2 ledger's stall deaths in version 3's words (see VERSION).
REWORD_STALLED = "UPDATE jobs SET error = ? WHERE status = 'dead' AND error = ?"
# A version-3 ledger's rows, as version 4 writes them (see VERSION).
BACKFILL_SUBMISSIONS = "UPDATE jobs SET submissions = 1 WHERE submissions IS NULL"

# Indexes of earlier versions, dropped where found (decision 0012); `jobs_live` was
# `jobs_unended` spelt with `NOT IN`; `inbox_job` is `inbox_order` without `id`.
RETIRED_INDEXES = ("jobs_claim", "jobs_pick", "jobs_delay", "jobs_lock", "jobs_done", "jobs_live", "inbox_job")


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
            if column not in have and column in table.defaults:  # as `create` makes it (version 5)
                db.execute(f"ALTER TABLE {table.name} ADD COLUMN {column} INTEGER"
                           f" DEFAULT {int(table.defaults[column])}")
            elif column not in have:  # nullable, no default: see VERSION
                db[table.name].add_column(column, type_)
    for index in INDEXES:
        db.execute(index_sql(index, SQLITE))
    for name in RETIRED_INDEXES:
        db.execute(f"DROP INDEX IF EXISTS {name}")


# Every schema object `setup` and the bookkeeping create: when all exist (and the
# built version is recorded) there is nothing to set up. A name missing from this
# list only means the full setup runs again, which is idempotent.
_SCHEMA = (
    *(t.name for t in TABLES), *(index.name for index in INDEXES),
    "projection_versions", "projection_failures", "idx_projection_failures_projection_resolved_at",
)


def _set_up_already(conn: Any) -> bool:
    """Every object of the ledger is there, built by this version (`conn`: an
    SQLite connection, or PostgreSQL's portable one)."""
    from gormes.projections import bookkeeping

    if dialect_of(conn) == POSTGRES:
        from gormes.projections import ledger_postgres

        names = ledger_postgres.present_relations(conn)
        schema: Iterable[str] = ledger_postgres.NAMES
    else:
        names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        schema = _SCHEMA
    return (
        names.issuperset(schema) and names.isdisjoint(RETIRED_INDEXES)
        and bookkeeping.built_version(conn, NAME) == VERSION
    )


def check_current(conn: Any, where: str | Path) -> None:
    """On a database opened read-only, where the ledger can be neither set up nor
    caught up: refuse unless it is set up for this gormes and no job event lies past
    the position it has folded (events of other streams do not count: a writer that
    never opened the queue does not move the ledger's position). `conn`: as
    `_set_up_already`'s."""
    if not _set_up_already(conn):
        raise StoreReadOnly(
            f"{where} is read-only and its job ledger is not set up for this gormes:"
            " open it once where it can be written"
        )
    behind = conn.execute(
        f"SELECT 1 FROM events WHERE {glob(conn, 'stream', 'job-*')} AND position > ? LIMIT 1",
        (_tracked(conn),),
    ).fetchone()
    if behind is not None:
        raise StoreReadOnly(
            f"{where} is read-only and its job ledger is behind the log: open it once where it can be written"
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
                built = bookkeeping.built_version(conn, NAME)
                if built is not None and built < 3:
                    conn.execute(REWORD_STALLED, (STALLED_ERROR, STALLED_ERROR_BEFORE))
                if built is not None and built < 4:
                    conn.execute(BACKFILL_SUBMISSIONS)
                if built is not None and built < 6:
                    reset(conn)  # folded again from 0 by the catch-up (see VERSION)
                if built != VERSION:
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
#
# Each event's UPDATE of its job's row is compiled from the job state machine's
# table (gormes/events/job_machine.py, the one `evolve` folds) by
# gormes/projections/ledger_sql.py. Written here, beyond the table: a submitted
# job's first row, a removal's deletes, the live-children count (the state keeps
# the set), the inbox and the transcript.


def _delete_job(conn: Any, job_id: str) -> None:
    conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
    conn.execute("DELETE FROM inbox WHERE job_id = ?", (job_id,))
    conn.execute("DELETE FROM transcript WHERE job_id = ?", (job_id,))
    ledger_tokens.delete_job(conn, job_id)


class Dialect(NamedTuple):
    """The few pieces of ledger SQL that SQLite and PostgreSQL spell differently;
    everything else is one text (run on PostgreSQL through a PortableConnection,
    gormes/events/postgres_sql.py)."""

    name: str
    option: str  # the option named by the parameter, true when set (one row per job)
    option_key: str  # how the parameter names it ({key})
    live_children_less_one: str  # live_children - 1, never below 0
    job_types: str  # the event types the ledger folds
    spelling: Spelling  # how a removal on an option is written (ledger_sql.py)


SQLITE_DIALECT = Dialect(
    name="sqlite",
    option="SELECT json_extract(options, ?) FROM jobs WHERE id = ?",
    option_key="$.{key}",
    live_children_less_one="max(live_children - 1, 0)",
    job_types="type GLOB 'job.*'",
    spelling=Spelling(
        not_option="NOT coalesce(json_extract(options, '$.{key}'), 0)",
        option_test="coalesce(json_extract(options, '$.{key}'), 0)",
        fused_removal=False,
    ),
)
POSTGRES_DIALECT = Dialect(
    name="postgres",
    option="SELECT coalesce((options::jsonb ->> CAST(? AS text))::boolean, false)"
    " FROM jobs WHERE id = ?",
    option_key="{key}",
    live_children_less_one="greatest(live_children - 1, 0)",
    job_types="type LIKE 'job.%'",
    spelling=Spelling(
        not_option="NOT coalesce((options::jsonb ->> '{key}')::boolean, false)",
        option_test="coalesce((options::jsonb ->> '{key}')::boolean, false)",
        fused_removal=True,
    ),
)


def dialect(conn: Any) -> Dialect:
    return POSTGRES_DIALECT if dialect_of(conn) == POSTGRES else SQLITE_DIALECT


def _compiled(d: Dialect) -> dict[Transition, Write | None]:
    extras = {
        JobChildAdded: "live_children = live_children + 1",
        JobChildDone: f"live_children = {d.live_children_less_one}",
    }
    return compile_writes(_jobs_columns(), d.spelling, extras)


_WRITES = {d.name: _compiled(d) for d in (SQLITE_DIALECT, POSTGRES_DIALECT)}


def _insert_job(conn: Any, rec: Recorded, e: JobSubmitted, t: Transition) -> None:
    o = e.options
    conn.execute(
        "INSERT INTO jobs(id, name, queue, status, priority, data, max_attempts, max_stalled,"
        " timeout_ms, parent_id, depth, created_at, delay_until, idempotency_key, options,"
        " version, updated_at, submitter, concurrency_key, concurrency_limit, debounce_key,"
        " submissions) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,1)",
        (
            e.job_id, e.name, o.queue, t.to, o.priority, _enc(e.data), o.max_attempts,
            o.max_stalled, o.timeout_ms, o.parent_id, e.depth, e.created_at, e.delay_until,
            o.idempotency_key, options_json(o), rec.version, e.created_at, _enc(e.submitter),
            o.concurrency_key, o.concurrency_limit, o.debounce_key,
        ),
    )


# A job's inbox and transcript rows are written only while it has a `jobs` row
# (INSERT ... SELECT FROM jobs). A log may go on with a job after its removal (a
# retry, then a message or a child's end: the queue refuses such a retry, but the
# ledger folds any log), and a row written then would be an orphan for good: a
# later removal on an option reads the option from the `jobs` row, and there is none.


def _transcribe(conn: Any, rec: Recorded, e: JobTranscribed) -> None:
    job_id = rec.stream[4:]
    conn.execute(
        "INSERT INTO transcript(job_id, seq, kind, text, data, at)"
        " SELECT id, ?, ?, ?, ?, ? FROM jobs WHERE id = ?",
        (rec.version, e.entry.kind, e.entry.text, _enc(e.entry.data), e.at, job_id),
    )
    conn.execute(
        "DELETE FROM transcript WHERE job_id = ? AND seq <= coalesce((SELECT seq FROM"
        " transcript WHERE job_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?), -1)",
        (job_id, job_id, TRANSCRIPT_CAP),
    )


_INBOX = (
    "INSERT INTO inbox(id, job_id, sender, payload, sent_at)"
    " SELECT ?, id, ?, ?, ? FROM jobs WHERE id = ?"
)


def _message_sent(conn: Any, rec: Recorded, e: JobMessageSent) -> None:
    conn.execute(_INBOX, (e.message_id, e.sender, _enc(e.payload), e.at, rec.stream[4:]))


def _child_done(conn: Any, rec: Recorded, e: JobChildDone) -> None:
    payload = {
        "type": "child_done", "child_id": e.child_id, "outcome": e.outcome,
        "result": e.result, "error": e.error,
    }
    conn.execute(_INBOX, (e.message_id, f"child:{e.child_id}", _enc(payload), e.at, rec.stream[4:]))


def _inbox_read(conn: Any, rec: Recorded, e: JobInboxRead) -> None:
    marks = ",".join("?" * len(e.message_ids))
    conn.execute(
        f"UPDATE inbox SET read_at = ? WHERE job_id = ? AND read_at IS NULL AND id IN ({marks})",
        (e.at, rec.stream[4:], *e.message_ids),
    )


# The inbox and the transcript: rows of their own tables, written before the
# event's UPDATE of the job's row (if it makes one).
_BEYOND_THE_TABLE: dict[type, Callable[[Any, Recorded, Any], None]] = {
    JobTranscribed: _transcribe, JobMessageSent: _message_sent, JobChildDone: _child_done,
    JobInboxRead: _inbox_read,
}


def apply_one(conn: Any, rec: Recorded, d: Dialect | None = None) -> None:
    """Fold one `job-*` event into the ledger. `conn` is an sqlite3 connection or a
    PortableConnection (PostgreSQL); `d` its dialect (looked up when not given)."""
    e = rec.event
    t = transition_of(e)
    if t is None:
        return
    if isinstance(e, JobSubmitted):
        _insert_job(conn, rec, e, t)
        return
    if t.removes == ALWAYS:
        _delete_job(conn, rec.stream[4:])
        return
    if type(e) in ledger_tokens.FOLDED:
        ledger_tokens.fold(conn, rec)  # before the row's UPDATE: it reads the row as it was
    beyond = _BEYOND_THE_TABLE.get(type(e))
    if beyond is not None:
        beyond(conn, rec, e)
    write = _WRITES[(d or dialect(conn)).name][t]
    if write is not None:
        _write(conn, write, [rec], write.params(rec))


def _write(conn: Any, write: Write, recs: list[Recorded], params: Any) -> None:
    """Run `write` for `recs` (one, or a run with `executemany`); when it may have
    left a row to remove, delete the rows of each job whose option says so."""
    if len(recs) == 1:
        cur = conn.execute(write.sql, params)
    else:
        cur = conn.executemany(write.sql, params)
    if write.removes is None or write.fused or cur.rowcount == len(recs):
        return
    for rec in recs:
        job_id = rec.stream[4:]
        if _option(conn, job_id, write.removes):
            _delete_job(conn, job_id)


def _option(conn: Any, job_id: str, key: str) -> bool:
    d = dialect(conn)
    row = conn.execute(d.option, (d.option_key.format(key=key), job_id)).fetchone()
    return bool(row and row[0])


# A run of `job.tokens_added` (an agent job's every turn: a batch holds one per
# job stepping) is written with `executemany`s too: its token rows, then the jobs
# rows' UPDATEs (`_write_run`).
_TOKENS_WRITE = next(w for t, w in _WRITES[SQLITE_DIALECT.name].items() if t.event is JobTokensAdded)

# The writes a run of events may share one `executemany` on SQLite: the event is its
# UPDATE and nothing else, or (`job.tokens_added`) its token rows and its UPDATE.
_RUNNABLE = {
    t: w for t, w in _WRITES[SQLITE_DIALECT.name].items()
    if w is not None and t.event is not JobSubmitted and t.event not in _BEYOND_THE_TABLE
    and (t.event not in ledger_tokens.FOLDED or w is _TOKENS_WRITE)
}


def apply(conn: Any, records: Sequence[Recorded]) -> None:
    """Fold a batch of events into the ledger (ignores everything but `job-*`).

    On SQLite a run of events of one transition, one after the other (a worker's
    round of claims, or of completions, or the token counts of jobs stepping), is
    written with one `executemany` per statement: the same statements, for each
    kind in the same order, as `apply_one` would run for them one by one."""
    d = dialect(conn)
    if d is not SQLITE_DIALECT:
        for rec in records:
            if rec.type.startswith("job.") and rec.stream.startswith("job-"):
                apply_one(conn, rec, d)
        return
    run_write: Write | None = None
    run: list[Recorded] = []
    for rec in records:
        if not (rec.type.startswith("job.") and rec.stream.startswith("job-")):
            continue
        write = _RUNNABLE.get(transition_of(rec.event))  # type: ignore[arg-type]
        if write is not run_write and run:
            _write_run(conn, run_write, run)  # type: ignore[arg-type]
            run = []
        run_write = write
        if write is None:
            apply_one(conn, rec, d)
        else:
            run.append(rec)
    if run:
        _write_run(conn, run_write, run)  # type: ignore[arg-type]


def _write_run(conn: Any, write: Write, run: list[Recorded]) -> None:
    if write is _TOKENS_WRITE:
        ledger_tokens.fold_added(conn, run)  # before the rows' UPDATEs, as apply_one
    if len(run) == 1:
        _write(conn, write, run, write.params(run[0]))
    else:
        _write(conn, write, run, [write.params(rec) for rec in run])


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
    for table in LedgerProjection.tables:
        conn.execute(f"DELETE FROM {table}")
    _track(conn, 0)


async def install(store: EventStore) -> None:
    """Create the tables, catch up with the log and make the ledger inline on
    `store` (an SQLiteEventStore or a PostgresEventStore). Idempotent."""
    import trio

    # The ledger is made inline inside the transaction that catches it up, so no
    # write can come between the two and be missed.
    if store.readonly:  # a database we may not write (read-only media or role, a replica, a copy to audit)
        where = getattr(store, "path", None) or getattr(store, "where", "the database")
        await store.read_sql(lambda conn: check_current(conn, where))
        return
    if store.dialect == POSTGRES:
        from gormes.projections import ledger_postgres

        # DDL is transactional on PostgreSQL: the tables are made in the writer's
        # transaction, under its table lock, so hosts starting together take turns.
        def attach_pg(tx: Transaction) -> int:
            ledger_postgres.set_up(tx.conn, NAME, VERSION)
            tx.execute("SELECT 1")  # flush anything staged before us in this batch
            position = catch_up(tx.conn)
            store.add_inline(inline_apply)
            return position

        await store.transact(attach_pg)
        return

    # SQLite: sqlite-utils reads the schema on a connection of its own, outside any
    # write transaction, so it opens the store's file itself.
    await trio.to_thread.run_sync(setup_file, cast("SQLiteEventStore", store).path)

    def attach(tx: Transaction) -> int:
        tx.execute("SELECT 1")  # flush anything staged before us in this batch
        position = catch_up(tx.conn)
        store.add_inline(inline_apply)
        return position

    await store.transact(attach)


async def rebuild(store: EventStore) -> int:
    """Empty the ledger and fold the whole log again, in one transaction."""

    def run(tx: Transaction) -> int:
        tx.execute("SELECT 1")
        reset(tx.conn)
        return catch_up(tx.conn)

    return await store.transact(run)


class LedgerProjection:
    """The ledger in the projection runner's shape."""

    name = NAME
    version = VERSION
    tables = ("jobs", "inbox", "transcript", ledger_tokens.JOB_TABLE, ledger_tokens.TOTALS_TABLE)
    types = ("job.*",)

    def setup(self, db: Any) -> None:
        setup(db)

    def apply(self, conn: Any, records: list[Recorded]) -> None:
        apply(conn, records)


LEDGER = LedgerProjection()
