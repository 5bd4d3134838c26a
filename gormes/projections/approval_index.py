"""The approvals index: which events of the stream `approvals` are whose, and which
requests are pending (decision 0057).

    approval_index(position, approval_id, status)

One row per event of `approvals`: its position, and the approval it is about
(NULL for an event that names none: a redacted one). A request's row also holds
the approval's status (`pending`, then the decision: `approved`, `denied`,
`timed_out`); the other rows hold NULL. So one approval's events are found by
its id, and the pending ones by their status, whatever the number of approvals
the stream holds. A redaction of indexed events indexes the approvals they name
again, in its transaction (`redacted`): the rows are always those a build from
the log as it is now would make.

Every read folds the events the rows point at with `fold_approvals`, the fold of
the whole stream: the fold of one approval never looks at another approval's
events, so what a read returns is what the whole stream's fold says of those
approvals. The status column only chooses which approvals a listing folds.

The index is caught up, not kept inline: a write transaction of the approval book
first indexes the events of `approvals` past the last one indexed (`catch_up`),
whoever appended them (a run's request, `gormes append`, an older gormes). A read
that may not write folds those events itself (the tail).

The rules that built the index are recorded as a projection's are, a row of
`projection_versions` (`VERSION`). Reads trust the rows only when they were
built by these rules (`indexed_version`). An index that is missing (a database
an older gormes wrote), or built by other rules (an older gormes, whose
redactions left stale rows), is built again from the whole stream by the next
write (`catch_up`); the first read of it on a store that may write makes that
write (gormes/actors/runs/approval_book.py). Read-only, its reads fold the
whole stream.

Plain blocking functions over one connection (`?` SQL: an sqlite3 connection or
PostgreSQL's PortableConnection), given the function that decodes stored rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gormes.events.approvals import (
    APPROVALS_STREAM, Approval, ApprovalDecided, ApprovalRequested, ApprovalUsed, fold_approvals,
)
from gormes.events.base import Recorded
from gormes.events.log_sql import COLUMNS, READ_STREAM, STREAM_VERSION
from gormes.events.postgres_sql import POSTGRES, dialect_of
from gormes.events.sql_fragments import one_of
from gormes.projections import bookkeeping
from gormes.projections.bookkeeping import has_table, has_tables

TABLE = "approval_index"
NAME = TABLE  # its row in projection_versions
# 1: before a redaction indexed the approvals it touched again; it recorded no
# version. Its index of a redacted log may hold stale rows, so it is built again.
VERSION = 2
PAGE = 5000  # events indexed per query while catching up (a first build folds the whole stream)
EVERY = 1 << 62  # no limit

Decode = Callable[[Sequence[Any]], list[Recorded]]


class _LookUp:
    """`indexed` not given: the read looks it up (`indexed_version`)."""


LOOK_UP = _LookUp()

_TABLE = ("CREATE TABLE IF NOT EXISTS approval_index("
          "position {integer} PRIMARY KEY, approval_id TEXT, status TEXT)")
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS approval_index_id ON approval_index(approval_id, position)",
    "CREATE INDEX IF NOT EXISTS approval_index_status ON approval_index(status, position)"
    " WHERE status IS NOT NULL",
)
# The version of `approvals` indexed: that of the event at the last position indexed.
# With the rules that built it: one statement, so a read asks no more than it did
# before versions (a round trip less on PostgreSQL).
_BUILT_AND_FOLDED = ("SELECT (SELECT version FROM projection_versions WHERE projection = ?),"
                     " coalesce((SELECT version FROM events WHERE position ="
                     " (SELECT max(position) FROM approval_index)), 0)")
_PAGE = f"SELECT {COLUMNS} FROM events WHERE stream = ? AND version > ? ORDER BY version LIMIT ?"
_INSERT = "INSERT INTO approval_index(position, approval_id, status) VALUES (?, ?, ?)"
# `status || ''`: found by its id, never by the status index (SQLite, with no
# statistics, would walk every pending request's entry instead).
_DECIDE = "UPDATE approval_index SET status = ? WHERE approval_id = ? AND status || '' = 'pending'"
_OF_STATUS = "SELECT approval_id FROM approval_index WHERE status = ? ORDER BY position DESC LIMIT ?"
_OF_ANY_STATUS = "SELECT approval_id FROM approval_index WHERE status IS NOT NULL ORDER BY position DESC LIMIT ?"
_EVENTS_OF = ("SELECT {columns} FROM approval_index a JOIN events e ON e.position = a.position"
              " WHERE {ids} ORDER BY e.position")
_NAMED_AT = "SELECT DISTINCT approval_id FROM approval_index WHERE approval_id IS NOT NULL AND {positions}"
_FORGET = "DELETE FROM approval_index WHERE {ids}"
_EMPTY = "DELETE FROM approval_index"


def _about(event: Any) -> str | None:
    if isinstance(event, (ApprovalRequested, ApprovalDecided, ApprovalUsed)):
        return event.approval_id
    return None


def apply(conn: Any, records: Sequence[Recorded]) -> None:
    """Index events of `approvals`, in position order, after those indexed before.
    Every request's row is `pending`; a decision sets the status of its request's
    rows that are still pending (the first decision stands, as in the fold)."""
    conn.executemany(_INSERT, [
        (r.position, _about(r.event), "pending" if isinstance(r.event, ApprovalRequested) else None)
        for r in records
    ])
    decided = [(r.event.decision, r.event.approval_id) for r in records if isinstance(r.event, ApprovalDecided)]
    if decided:
        conn.executemany(_DECIDE, decided)


def indexed_version(conn: Any) -> int | None:
    """The version of `approvals` the index has indexed, or None when the index is
    missing or was built by other rules than these (`VERSION`): only a current
    index's rows may be trusted. One catalog read and one row."""
    if not has_tables(conn, (TABLE, bookkeeping.VERSIONS)):
        return None
    built, folded = conn.execute(_BUILT_AND_FOLDED, (NAME,)).fetchone()
    return folded if built == VERSION else None


def current(conn: Any) -> bool:
    """Whether reads may trust the index (`indexed_version`)."""
    return indexed_version(conn) is not None


def create(conn: Any) -> None:
    integer = "BIGINT" if dialect_of(conn) == POSTGRES else "INTEGER"
    for statement in (_TABLE.format(integer=integer), *_INDEXES):
        conn.execute(statement)


def _start_over(conn: Any) -> None:
    """An empty index recorded as built by these rules, for `catch_up` to fill from
    the whole stream (whatever rules built the rows it drops)."""
    create(conn)
    conn.execute(_EMPTY)
    bookkeeping.ensure_tables(conn)
    bookkeeping.set_built_version(conn, NAME, VERSION)


def catch_up(conn: Any, decode: Decode) -> int:
    """Build the index if it is missing or built by other rules, and index every
    event of `approvals` past the last one indexed; the version indexed. Call
    inside a write transaction, after its appends so far were sent
    (`Transaction.flush`)."""
    folded = indexed_version(conn)
    if folded is None:
        _start_over(conn)
        folded = 0
    while True:
        records = decode(conn.execute(_PAGE, (APPROVALS_STREAM, folded, PAGE)).fetchall())
        if not records:
            return folded
        apply(conn, records)
        folded = records[-1].version


def redacted(conn: Any, decode: Decode, positions: Sequence[int]) -> None:
    """In the transaction that redacted `positions` of `approvals`: index the
    approvals those events named again, from their events as they are now. A
    tombstone names no approval, and a request's status is what its events still
    say (a redacted decision leaves it pending, a redacted request leaves no
    status to list). Positions not indexed yet need nothing: `catch_up` will
    index the tombstones."""
    if not positions or not has_table(conn, TABLE):
        return
    params: list[Any] = []
    where = one_of(conn, "position", sorted(set(positions)), params)
    ids = [approval_id for (approval_id,) in conn.execute(_NAMED_AT.format(positions=where), params).fetchall()]
    if not ids:
        return
    records = decode(_events_of(conn, ids))
    params = []
    conn.execute(_FORGET.format(ids=one_of(conn, "approval_id", ids, params)), params)
    apply(conn, records)


def lags(conn: Any, *, indexed: int | None | _LookUp = LOOK_UP) -> bool:
    """Whether `approvals` holds events the index has not indexed (or it has events
    and the index is not current): whether `catch_up` has anything to index.
    `indexed`: as for `approval_on`."""
    if isinstance(indexed, _LookUp):
        indexed = indexed_version(conn)
    return conn.execute(STREAM_VERSION, (APPROVALS_STREAM,)).fetchone()[0] > (indexed or 0)


def _events_of(conn: Any, approval_ids: Iterable[str]) -> list[Any]:
    ids = sorted(set(approval_ids))
    if not ids:
        return []
    params: list[Any] = []
    where = one_of(conn, "a.approval_id", ids, params)
    columns = ", ".join(f"e.{c}" for c in COLUMNS.split(", "))
    return conn.execute(_EVENTS_OF.format(columns=columns, ids=where), params).fetchall()


def _fold(records: Iterable[Recorded]) -> dict[str, Approval]:
    by_position = {r.position: r.event for r in records}  # a tail and the index may both hold one
    return fold_approvals(sorted(by_position.items(), key=lambda pair: pair[0]))


def approval_on(conn: Any, decode: Decode, approval_id: str, *,
                indexed: int | None | _LookUp = LOOK_UP) -> Approval | None:
    """One approval, from its own events (and those the index has not indexed yet).
    `indexed`: `indexed_version`, when the caller has it (else looked up)."""
    if isinstance(indexed, _LookUp):
        indexed = indexed_version(conn)
    if indexed is None:
        return _fold(decode(conn.execute(READ_STREAM, (APPROVALS_STREAM, 0)).fetchall())).get(approval_id)
    tail = conn.execute(READ_STREAM, (APPROVALS_STREAM, indexed)).fetchall()
    return _fold(decode(tail + _events_of(conn, [approval_id]))).get(approval_id)


def approvals_on(conn: Any, decode: Decode, *, status: str = "all", limit: int | None = None,
                 indexed: int | None | _LookUp = LOOK_UP) -> dict[str, Approval]:
    """The newest `limit` approvals of `status` (pending, approved, denied,
    timed_out, or all), oldest first: the index chooses them, their events say
    what they are. The version indexed is read before the tail, and the tail
    before the rows: the events a read misses are newer than all it has.
    `indexed`: as for `approval_on`."""
    limit = EVERY if limit is None else limit
    if isinstance(indexed, _LookUp):
        indexed = indexed_version(conn)
    if indexed is None:
        records = decode(conn.execute(READ_STREAM, (APPROVALS_STREAM, 0)).fetchall())
        return _chosen(_fold(records), status, limit)
    tail = decode(conn.execute(READ_STREAM, (APPROVALS_STREAM, indexed)).fetchall())
    # The tail's decisions may take as many of the indexed pending out of the listing.
    wanted = min(EVERY, limit + len(tail))
    if status == "all":
        chosen = conn.execute(_OF_ANY_STATUS, (wanted,)).fetchall()
    else:
        chosen = conn.execute(_OF_STATUS, (status, wanted)).fetchall()
    ids = {approval_id for (approval_id,) in chosen}
    ids.update(i for r in tail if (i := _about(r.event)) is not None)
    return _chosen(_fold([*tail, *decode(_events_of(conn, ids))]), status, limit)


def _chosen(approvals: dict[str, Approval], status: str, limit: int) -> dict[str, Approval]:
    kept = [a for a in approvals.values() if status == "all" or a.status == status]
    kept.sort(key=lambda a: a.requested_position)
    return {a.request.approval_id: a for a in kept[max(0, len(kept) - limit):]}
