"""What the gateways' call rate did: the calls it refused and the calls it counts (decision 0075).

A call the call rate refuses (`CallRateLimited`, gormes/control/call_rate.py,
decision 0072) leaves one audit record, as every refusal does: `audit.operation`,
outcome `denied`, its `error` the refusal's line,

    CallRateLimited: 'gateway' callers may make at most 600 calls a minute between
    them (GORMES_GATEWAY_RATE=600rpm); retry in 12s

Those records are what `gormes top` and `gormes doctor` count. The log keeps every
audit record (retention never deletes them) and a flood's refusals can be most of
them, so they are read through a partial index of `events` that holds these
records and no other, by when they were recorded:

    CREATE INDEX events_call_refused ON events(recorded_at)
        WHERE type = 'audit.operation' AND substr(<the record's error>, 1, 16) = 'CallRateLimited:'

The database keeps it for every writer (this gormes, an older one, an import, a
migration's copy), in the transaction that inserts the record; a row that is not
an audit record costs its writer the test of its `type`. A `gormes mcp` process
makes it before its first limited call (`call_rate.ensure_refusals_index`),
so a database on which this gormes ever limited a gateway has it; once, on a log
that already holds records, its build reads the log (decision 0075 measures it).

The reads (`refusals`) cost what they return: a count of the refusals recorded
since a time, stopped at `COUNT_CAP` (past it, "more than"), and the first and
the latest of them (one index entry each). With no index they read nothing and
say so (None): a scan of the audit records is what the index is there to spare.
Two more (decision 0079): `refused_callers`, whom the latest `COUNT_CAP` of them
were refused to (the doctor's clients refused most), and `refused_after`, those
recorded past a log position (the `/metrics` counter, gormes/telemetry/refusal_count.py).

The limit in force is each `gormes mcp` process's own setting, which the store
does not hold: the latest refusal's line states the one that refused it
(`call_rate.stated_rule`). The calls counted are the leases of the key `calls:gateway`
(gormes/control/limits_table.py): a call admitted takes one, and each look deletes
those past its process's window, so the leases younger than a window are the calls
that window counts; older ones may be left over (no call looked since) and are
never counted as current.

Plain blocking functions over one connection (`?` SQL: an sqlite3 connection or
PostgreSQL's PortableConnection).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gormes.control import limits_table
from gormes.events.postgres_sql import POSTGRES, SQLITE, dialect_of
from gormes.events.sql_fragments import json_text_in
from gormes.projections.bookkeeping import has_table

INDEX = "events_call_refused"
AUDIT_TYPE = "audit.operation"
ERROR_KIND = "CallRateLimited:"  # how the executor begins a refused call's `error` (error_text_of)
# The most refusals a count reads: past it the answer is "more than COUNT_CAP".
COUNT_CAP = 10_000


def refused_where(dialect: str) -> str:
    """The index's WHERE, as the `dialect` database must read it in the index and in
    every query that uses it (SQLite uses a partial index only for a query whose
    WHERE holds its terms as they are written). `type` first: a row that is not an
    audit record is not read further."""
    error = json_text_in(dialect, "$.error")
    return f"type = '{AUDIT_TYPE}' AND substr({error}, 1, {len(ERROR_KIND)}) = '{ERROR_KIND}'"


def index_sql(dialect: str) -> str:
    return f"CREATE INDEX IF NOT EXISTS {INDEX} ON events(recorded_at) WHERE {refused_where(dialect)}"


def indexed(conn: Any) -> bool:
    """Whether the database has the index (one catalog read)."""
    if dialect_of(conn) == POSTGRES:
        row = conn.execute(
            "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relname = ? AND c.relkind = 'i'", (INDEX,)).fetchone()
    else:
        row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (INDEX,)).fetchone()
    return row is not None


def create_index(tx: Any) -> None:
    """Make the index, in a write transaction (a `Transaction`)."""
    tx.execute(index_sql(dialect_of(tx)))


class Refusals(NamedTuple):
    """The refused calls recorded after a time."""

    count: int  # at most COUNT_CAP
    more: bool  # the count stopped at COUNT_CAP: there are more
    first_at: float | None = None  # seconds since the epoch, as the log recorded them
    last_at: float | None = None
    last_caller: str | None = None  # who the latest was refused to ("mcp:<client name>")
    last_error: str | None = None  # its line, which states the setting that refused it


def counting_sql(dialect: str) -> str:
    """The count: the index's entries after a time, and no more than a limit."""
    return (f"SELECT count(*) FROM (SELECT 1 FROM events WHERE {refused_where(dialect)}"
            " AND recorded_at > ? LIMIT ?) AS refused")


def first_sql(dialect: str) -> str:
    return (f"SELECT recorded_at FROM events WHERE {refused_where(dialect)} AND recorded_at > ?"
            " ORDER BY recorded_at LIMIT 1")


def latest_sql(dialect: str) -> str:
    caller, error = json_text_in(dialect, "$.caller"), json_text_in(dialect, "$.error")
    return (f"SELECT recorded_at, {caller}, {error} FROM events WHERE {refused_where(dialect)}"
            " AND recorded_at > ? ORDER BY recorded_at DESC LIMIT 1")


def refusals(conn: Any, since: float, cap: int | None = None) -> Refusals | None:
    """The calls the call rate refused that the log recorded after `since` (seconds
    since the epoch), read from the index, counted up to `cap` (None: COUNT_CAP):
    None when the database has no index."""
    cap = COUNT_CAP if cap is None else cap
    if not indexed(conn):
        return None
    dialect = POSTGRES if dialect_of(conn) == POSTGRES else SQLITE
    count = int(conn.execute(counting_sql(dialect), (since, cap + 1)).fetchone()[0])
    if count == 0:
        return Refusals(0, False)
    first = conn.execute(first_sql(dialect), (since,)).fetchone()
    latest = conn.execute(latest_sql(dialect), (since,)).fetchone()
    return Refusals(min(count, cap), count > cap, float(first[0]), float(latest[0]), latest[1], latest[2])


class Leases(NamedTuple):
    """The key's leases: the calls admitted that a window may still count."""

    recent: int  # taken after the time asked
    latest_at: float | None  # the latest lease held, whenever it was taken


def leases(conn: Any, key: str, since: float) -> Leases:
    """`key`'s leases taken after `since`, and when the latest was: two ranges of
    `rate_leases_key_at`, the first no longer than the limit's count of rows (no
    table yet: none)."""
    if not has_table(conn, limits_table.LEASES):
        return Leases(0, None)
    recent = conn.execute(f"SELECT count(*) FROM {limits_table.LEASES} WHERE key = ? AND at > ?",
                          (key, since)).fetchone()[0]
    latest = conn.execute(f"SELECT at FROM {limits_table.LEASES} WHERE key = ? ORDER BY at DESC LIMIT 1",
                          (key,)).fetchone()
    return Leases(int(recent), None if latest is None else float(latest[0]))


# -- who was refused: the top callers of a window's latest refusals (the doctor's) --------------

# The callers a breakdown names; the rest are counted together.
TOP_CALLERS = 5


class ByCaller(NamedTuple):
    """The latest refusals after a time, by whom they were refused to."""

    top: list[tuple[str, int]]  # (caller, refusals), most refused first, then by name; TOP_CALLERS at most
    others: int  # callers past the top ones
    others_refused: int  # their refusals
    read: int  # the refusals read: at most the cap, the latest ones


def by_caller_sql(dialect: str) -> str:
    """The callers of the latest refusals after a time, no more of them than a limit:
    one range of the index read from its newest end, and each entry's row."""
    caller = json_text_in(dialect, "$.caller")
    return (f"SELECT caller, count(*) FROM (SELECT coalesce({caller}, '') AS caller FROM events"
            f" WHERE {refused_where(dialect)} AND recorded_at > ? ORDER BY recorded_at DESC LIMIT ?) AS latest"
            " GROUP BY caller")


def refused_callers(conn: Any, since: float, cap: int | None = None, top: int | None = None) -> ByCaller | None:
    """Whom the latest `cap` (None: COUNT_CAP) refusals recorded after `since` were
    refused to: the `top` (None: TOP_CALLERS) callers and how many more. It reads what
    a count does, at most `cap` index entries, and each one's row (its caller). None
    with no index."""
    cap = COUNT_CAP if cap is None else cap
    top = TOP_CALLERS if top is None else top
    if not indexed(conn):
        return None
    dialect = POSTGRES if dialect_of(conn) == POSTGRES else SQLITE
    found = sorted(((str(c), int(n)) for c, n in conn.execute(by_caller_sql(dialect), (since, cap))),
                   key=lambda row: (-row[1], row[0]))
    rest = found[top:]
    return ByCaller(found[:top], len(rest), sum(n for _, n in rest), sum(n for _, n in found))


# -- the refusals recorded after a log position: the metric's counter ---------------------------

# How far behind the latest record before it a refusal's `recorded_at` may be and still
# be counted by `refused_after`: a clock stepped back, or another host's clock behind.
CLOCK_SLACK_S = 10.0


class Head(NamedTuple):
    position: int  # 0: an empty log
    recorded_at: float | None


def head(conn: Any) -> Head:
    """The log's last position and when it was recorded (one primary-key entry)."""
    row = conn.execute("SELECT position, recorded_at FROM events ORDER BY position DESC LIMIT 1").fetchone()
    return Head(0, None) if row is None else Head(int(row[0]), float(row[1]))


def after_sql(dialect: str) -> str:
    """The refusals between two positions, found by a range of the index (`position + 0`
    keeps the planner off the primary key, whose range would read every row of the span)."""
    return (f"SELECT count(*) FROM events WHERE {refused_where(dialect)} AND recorded_at >= ?"
            " AND position + 0 > ? AND position + 0 <= ?")


def refused_after(conn: Any, after: int, up_to: int, since: float) -> int | None:
    """The refusals at positions after `after` up to `up_to`, read from the index
    entries recorded at `since` or later: what was recorded since the head `after`
    was read, if `since` is no later than CLOCK_SLACK_S before that head's time. It
    costs those entries and the ones of the slack. None with no index."""
    if not indexed(conn):
        return None
    dialect = POSTGRES if dialect_of(conn) == POSTGRES else SQLITE
    return int(conn.execute(after_sql(dialect), (since, after, up_to)).fetchone()[0])
