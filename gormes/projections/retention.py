"""Which streams retention may remove, and what it does to the projections (decision 0029).

`select(conn, horizon)` chooses, from the log and the job ledger as they are on
`conn` (inside the retention's write transaction, or a read for `--dry-run`):

- a job stream (`job-<id>`) whose job is terminal in the ledger (completed,
  failed, dead, cancelled) or gone from it (pruned, removed on completion or
  failure);
- a run stream (`run-<id>`) whose last event is its end (completed, failed,
  cancelled);
- a cron stream (`cron-<name>`) whose last event is `cron.removed`;

each with its last event recorded before the horizon. Job and run streams are
tied into groups (a job and its child jobs, the runs it started, their
subagents, and the forks and resumptions of any of them, which read the run
they continue): a group goes whole or stays whole, so nothing kept points into
what was archived. A run whose `run.started` was redacted cannot say what it is
tied to: it stays, with its group (so does a job whose `job.submitted` was).

Not chosen: memory streams (`memory-<scope>` is one stream per scope that never
ends; taking superseded observations out of its middle would change the
versions the stream's fold counts and the first_seen and observation counts the
memory projection keeps), a live cron schedule's `cron.fired` events (the
schedule's fold counts them and its version with them; the jobs they submitted
go as jobs), audit streams (the hash chain, decision 0018) and every other
stream.

`reset_affected(tx, types, first)`: in the same transaction, every projection
that folds one of the archived types and has folded past the first archived
position is emptied and its tracking set to 0 (the ledger is folded again at
once): the projections then equal a rebuild of the remaining log by
construction, so `gormes projections rebuild --check` needs no horizon (decision
0029). On SQLite the doctor's remembered scan is dropped too, so the next doctor
run folds the whole log again; on PostgreSQL, where the retention's role may not
be allowed to write the doctor's table, the doctor's fold itself sees the
`log.retained` after its remembered position and folds the whole log again
(decision 0084; it does so on SQLite as well).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from gormes.events.base import REDACTED_SCHEMA_VERSION
from gormes.events.cron import CRON_STREAM_PREFIX
from gormes.events.jobs import TERMINAL
from gormes.events.postgres_sql import POSTGRES, dialect_of
from gormes.events.runs import TERMINAL_TYPES
from gormes.events.sql_fragments import glob, json_text
from gormes.projections import bookkeeping
from gormes.projections.refold import empty_reached

if TYPE_CHECKING:
    from gormes.events.store import Transaction

RUN_ENDS = frozenset(cls.__struct_config__.tag for cls in TERMINAL_TYPES)
CHUNK = 500
DOCTOR_SCAN = "doctor_scan"


class Selection(msgspec.Struct, kw_only=True):
    """The streams a retention at `horizon` takes."""

    horizon: float
    streams: list[str]
    kinds: dict[str, int]  # streams per kind
    events: int  # events they hold
    data_bytes: int  # the length of their stored JSON
    first_position: int | None
    last_position: int | None


def _ended(conn: Any, prefix: str, horizon: float) -> list[tuple[str, str]]:
    """(stream, its last event's type) of each stream named `<prefix>*` whose last
    event was recorded before `horizon`."""
    rows = conn.execute(
        "SELECT e.stream, e.type FROM events AS e JOIN "
        f"(SELECT stream, max(version) AS v FROM events WHERE {glob(conn, 'stream', prefix + '*')} "
        "GROUP BY stream) AS l ON e.stream = l.stream AND e.version = l.v "
        "WHERE e.recorded_at < ?", (horizon,),
    ).fetchall()
    return [(stream, type_) for stream, type_ in rows]


def _terminal_jobs(conn: Any, job_ids: Sequence[str]) -> set[str]:
    """Those of `job_ids` the ledger holds as terminal or does not hold (removed)."""
    out = set(job_ids)
    for i in range(0, len(job_ids), CHUNK):
        chunk = job_ids[i : i + CHUNK]
        rows = conn.execute(
            f"SELECT id, status FROM jobs WHERE id IN ({', '.join('?' * len(chunk))})", chunk
        ).fetchall()
        out -= {job_id for job_id, status in rows if status not in TERMINAL}
    return out


class _Groups:
    """Union-find over stream names."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        parent = self.parent
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:
            parent[x], x = root, parent[x]
        return root

    def tie(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


def _ties(conn: Any, groups: _Groups) -> tuple[set[str], set[str]]:
    """Tie every job to its parent job and every run to its job, parent run and the
    run it continues, from the `job.submitted` and `run.started` events; (the
    streams that have one, those whose one is redacted: they must stay)."""
    seen: set[str] = set()
    untied: set[str] = set()
    rows = conn.execute(
        f"SELECT stream, type_version, {json_text(conn, '$.options.parent_id')}, NULL, NULL, NULL "
        "FROM events WHERE type = 'job.submitted' "
        f"UNION ALL SELECT stream, type_version, {json_text(conn, '$.parent_run_id')}, "
        f"{json_text(conn, '$.job_id')}, {json_text(conn, '$.forked_from.run_id')}, "
        f"{json_text(conn, '$.resumed_from.run_id')} FROM events WHERE type = 'run.started'"
    ).fetchall()
    for stream, type_version, parent, job_id, forked, resumed in rows:
        seen.add(stream)
        if type_version == REDACTED_SCHEMA_VERSION:
            untied.add(stream)
            continue
        if stream.startswith("job-"):
            if parent:
                groups.tie(stream, "job-" + parent)
            continue
        if parent:
            groups.tie(stream, "run-" + parent)
        if job_id:
            groups.tie(stream, "job-" + job_id)
        for origin in (forked, resumed):
            if origin:
                groups.tie(stream, "run-" + origin)
    return seen, untied


def _sizes(conn: Any, streams: Sequence[str]) -> tuple[int, int, int | None, int | None]:
    events = size = 0
    first: int | None = None
    last: int | None = None
    for i in range(0, len(streams), CHUNK):
        chunk = streams[i : i + CHUNK]
        n, b, lo, hi = conn.execute(
            f"SELECT count(*), coalesce(sum(length(data)), 0), min(position), max(position) FROM events "
            f"WHERE stream IN ({', '.join('?' * len(chunk))})", chunk,
        ).fetchone()
        events, size = events + int(n), size + int(b)
        if lo is not None:
            first = lo if first is None else min(first, lo)
            last = hi if last is None else max(last, hi)
    return events, size, first, last


def select(conn: Any, horizon: float) -> Selection:
    """The streams a retention at `horizon` takes (see the module doc); `conn` is
    a connection of the log with its job ledger (`?` SQL, either database)."""
    jobs = [s for s, _ in _ended(conn, "job-", horizon)]
    ended_jobs = {"job-" + j for j in _terminal_jobs(conn, [s[4:] for s in jobs])}
    ended_runs = {s for s, t in _ended(conn, "run-", horizon) if t in RUN_ENDS}
    candidates = ended_jobs | ended_runs
    groups = _Groups()
    seen, untied = _ties(conn, groups)
    # a group goes whole: every member of it in the log must be a candidate (a
    # stream only named, a parent archived before, say, keeps nothing back)
    members: dict[str, list[str]] = {}
    for stream in seen | candidates:
        members.setdefault(groups.find(stream), []).append(stream)
    kept_roots = {root for root, group in members.items()
                  if any(s not in candidates or s in untied for s in group)}
    taken = sorted(s for s in candidates if groups.find(s) not in kept_roots)
    crons = sorted(s for s, t in _ended(conn, CRON_STREAM_PREFIX, horizon) if t == "cron.removed")
    streams = taken + crons
    kinds: dict[str, int] = {}
    for stream in streams:
        kind = stream.split("-", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    events, size, first, last = _sizes(conn, streams)
    return Selection(horizon=horizon, streams=streams, kinds=kinds, events=events, data_bytes=size,
                     first_position=first, last_position=last)


def reset_affected(tx: Transaction, types: Iterable[str], first: int) -> list[str]:
    """Inside the retention's transaction, after the delete: empty what it reaches
    (the ledger is folded again at once) and drop the doctor's remembered scan; the
    names of the projections emptied."""
    names = empty_reached(tx, types, first)
    conn = tx.conn
    if dialect_of(conn) != POSTGRES and bookkeeping.has_table(conn, DOCTOR_SCAN):
        tx.execute(f"DELETE FROM {DOCTOR_SCAN}")
    return names
