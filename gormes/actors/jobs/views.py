"""The typed views of the job queue: what `JobQueue` returns and the CLI prints.

Built from ledger rows (`job_from_row`, `message_from_row`); JSON columns are decoded.
A claim builds its jobs from the states it has just folded and changed
(`job_from_state`): the same Job its ledger rows would give, without reading them back
(tests/actors/test_job_machine.py folds random histories both ways and compares).
What a status means (terminal, live, claimable, ...) is read from the job state
machine's table, gormes/events/job_machine.py, like the statuses themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec

from gormes.actors.jobs.pages import Keyset, read_page
from gormes.actors.jobs.state import InvalidJob, JobState
from gormes.events.job_machine import LIVE, STATUSES, TERMINAL
from gormes.events.jobs import JobOptions, Submitter, Tokens
from gormes.events.postgres_sql import dialect_of
from gormes.events.sql_fragments import json_text
from gormes.projections import ledger

_decode = msgspec.json.Decoder()
_options = msgspec.json.Decoder(JobOptions)
_submitter = msgspec.json.Decoder(Submitter)


class Job(msgspec.Struct, kw_only=True):
    """A job as the ledger shows it (the JSON of `gormes jobs get --json`)."""

    id: str
    name: str
    queue: str
    status: str
    priority: int
    data: Any
    result: Any = None
    error: str | None = None
    attempts_made: int = 0
    attempts_started: int = 0
    stalled_counter: int = 0
    max_attempts: int = 3
    max_stalled: int = 5
    parent_id: str | None = None
    depth: int = 0
    progress: Any = None
    tokens: Tokens = Tokens()
    created_at: int = 0
    started_at: int | None = None
    finished_at: int | None = None
    lock_token: str | None = None
    lock_until: int | None = None
    delay_until: int | None = None
    idempotency_key: str | None = None
    worker_id: str | None = None
    live_children: int = 0
    options: JobOptions = JobOptions()
    submitter: Submitter | None = None  # None: not recorded (older logs, Python callers)
    coalesced: bool = False  # submit returned an existing job (idempotency, max_waiting, debounce)
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    debounce_key: str | None = None
    submissions: int = 1  # itself and the submissions coalesced into it (debounce)

    @property
    def terminal(self) -> bool:
        """It has ended (completed, failed, dead or cancelled): nothing more happens to it."""
        return self.status in TERMINAL

    @property
    def live(self) -> bool:
        return self.status in LIVE


class InboxMessage(msgspec.Struct, kw_only=True):
    id: str
    job_id: str
    sender: str  # "operator", the parent's id, or "child:<id>" for child_done
    payload: Any
    sent_at: int
    read_at: int | None = None


class JobStats(msgspec.Struct, kw_only=True):
    total: int
    by_status: dict[str, int]
    by_queue: dict[str, dict[str, int]]
    # Every job's own tokens, each counted once (a child's roll-up into its parent
    # not again), removed jobs' included; `wasted` the part spent by attempts whose
    # work was not kept (gormes/projections/ledger_tokens.py).
    tokens: Tokens = Tokens()
    wasted: Tokens = Tokens()


class PruneResult(msgspec.Struct, kw_only=True):
    ids: list[str]
    dry_run: bool

    @property
    def count(self) -> int:
        return len(self.ids)


def _json(text: str | None) -> Any:
    return None if text is None else _decode.decode(text)


def job_from_row(columns: Sequence[str], row: Sequence[Any], *, coalesced: bool = False) -> Job:
    r = dict(zip(columns, row))
    return Job(
        id=r["id"], name=r["name"], queue=r["queue"], status=r["status"],
        priority=r["priority"], data=_json(r["data"]), result=_json(r["result"]),
        error=r["error"], attempts_made=r["attempts_made"],
        attempts_started=r["attempts_started"], stalled_counter=r["stalled_counter"],
        max_attempts=r["max_attempts"], max_stalled=r["max_stalled"],
        parent_id=r["parent_id"], depth=r["depth"], progress=_json(r["progress"]),
        tokens=Tokens(
            input=r["tokens_input"], output=r["tokens_output"],
            cache_read=r["tokens_cache_read"], cache_write=r["tokens_cache_write"] or 0,
            reasoning=r["tokens_reasoning"] or 0,
        ),
        created_at=r["created_at"], started_at=r["started_at"],
        finished_at=r["finished_at"], lock_token=r["lock_token"],
        lock_until=r["lock_until"], delay_until=r["delay_until"],
        idempotency_key=r["idempotency_key"], worker_id=r["worker_id"],
        live_children=r["live_children"],
        options=_options.decode(r["options"]) if r["options"] else JobOptions(),
        submitter=_submitter.decode(r["submitter"]) if r.get("submitter") else None,
        coalesced=coalesced, concurrency_key=r["concurrency_key"],
        concurrency_limit=r["concurrency_limit"], debounce_key=r["debounce_key"],
        submissions=r["submissions"],
    )


def job_from_state(state: JobState) -> Job:
    """The Job the ledger row of `state` holds (the ledger folds the same events
    into its columns as `evolve` into the state)."""
    o = state.options
    return Job(
        id=state.id, name=state.name, queue=o.queue, status=state.status,
        priority=o.priority, data=state.data, result=state.result, error=state.error,
        attempts_made=state.attempts_made, attempts_started=state.attempts_started,
        stalled_counter=state.stalled_counter, max_attempts=o.max_attempts,
        max_stalled=o.max_stalled, parent_id=o.parent_id, depth=state.depth,
        progress=state.progress, tokens=state.tokens, created_at=state.created_at,
        started_at=state.started_at, finished_at=state.finished_at,
        lock_token=state.lock_token, lock_until=state.lock_until,
        delay_until=state.delay_until, idempotency_key=o.idempotency_key,
        worker_id=state.worker_id, live_children=len(state.live_children), options=o,
        submitter=state.submitter, concurrency_key=o.concurrency_key,
        concurrency_limit=o.concurrency_limit, debounce_key=o.debounce_key,
        submissions=state.submissions,
    )


MESSAGE_COLUMNS = "id, job_id, sender, payload, sent_at, read_at"


def message_from_row(row: Sequence[Any]) -> InboxMessage:
    id_, job_id, sender, payload, sent_at, read_at = row
    return InboxMessage(
        id=id_, job_id=job_id, sender=sender, payload=_json(payload),
        sent_at=sent_at, read_at=read_at,
    )


# -- reading the ledger (plain SQL on a connection: JobQueue's reads, and the CLI's
# quick reads of an SQLite file that need no event loop) --------------------------


def select_job(conn: Any, job_id: str) -> Job | None:
    cur = conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,))
    row = cur.fetchone()
    return None if row is None else job_from_row([d[0] for d in cur.description], row)


def owned_by(conn: Any, owner: tuple[str, str | None]) -> tuple[list[str], list[Any]]:
    """The WHERE terms (and their parameters) of the jobs whose submitter has the
    trust class and scope of `owner` (trust, scope): a gateway's or child agent's own."""
    trust, scope = owner
    terms = [f"{json_text(conn, '$.trust', 'submitter')} = ?"]
    if scope is None:
        return [*terms, f"{json_text(conn, '$.scope', 'submitter')} IS NULL"], [trust]
    return [*terms, f"{json_text(conn, '$.scope', 'submitter')} = ?"], [trust, scope]


def _filters(conn: Any, status: str | None, queue: str | None, name: str | None,
             owner: tuple[str, str | None] | None) -> tuple[list[str], list[Any]]:
    if status is not None and status not in STATUSES:
        raise InvalidJob(f"unknown status {status!r} (known: {', '.join(STATUSES)})")
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("status", status), ("queue", queue), ("name", name)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if owner is not None:
        terms, more = owned_by(conn, owner)
        if owner[0] not in ledger.UNCAPPED:
            # `jobs_capped_owned`'s WHERE, term for term (SQLite uses a partial index
            # only for a query that says it): the owner's jobs are a range of it.
            terms = [ledger.capped(dialect_of(conn)), *terms]
        where = [*terms, *where]
        params = [*more, *params]
    return where, params


def _where(terms: list[str]) -> str:
    return " WHERE " + " AND ".join(terms) if terms else ""


NEWEST_FIRST = " ORDER BY created_at DESC, id DESC LIMIT ?"


def select_jobs(conn: Any, status: str | None, queue: str | None, name: str | None,
                limit: int, owner: tuple[str, str | None] | None = None) -> list[Job]:
    """Newest first; with `owner` (trust, scope), only the jobs whose submitter has
    that trust class and scope. Raises `InvalidJob` for an unknown status."""
    where, params = _filters(conn, status, queue, name, owner)
    cur = conn.execute("SELECT * FROM jobs" + _where(where) + NEWEST_FIRST, (*params, limit))
    cols = [d[0] for d in cur.description]
    return [job_from_row(cols, row) for row in cur.fetchall()]


# The columns of a job's row that grow with what it holds: a page is cut on their
# bytes. The others are a job's fixed fields, names and keys of bounded length.
GROWING = ("data", "result", "error", "progress")
JOBS_NEWEST_FIRST = Keyset("jobs", "*", ("created_at", "id"), GROWING, descending=True)
# A job's inbox is read as it was written, oldest first (decision 0076's addendum).
INBOX_OLDEST_FIRST = Keyset("inbox", MESSAGE_COLUMNS, ("sent_at", "id"), ("payload",), descending=False)


class JobPage(NamedTuple):
    jobs: list[Job]
    more: bool  # jobs past the last one here match too


def select_job_page(conn: Any, status: str | None, queue: str | None, name: str | None, limit: int,
                    owner: tuple[str, str | None] | None = None, *, before: tuple[int, str] | None = None,
                    max_bytes: int) -> JobPage:
    """`select_jobs`, from the job after `before` (the (created_at, id) of the last job
    of the page before), as a page: at most `limit` jobs, and past its first job at
    most `max_bytes` of their `GROWING` columns; the rows past the page are not read
    (gormes/actors/jobs/pages.py). An owner of a capped class reads its own entries of
    `jobs_capped_owned` and no one else's job (`_filters`)."""
    where, params = _filters(conn, status, queue, name, owner)
    page = read_page(conn, JOBS_NEWEST_FIRST, where, params, limit, past=before, max_bytes=max_bytes)
    return JobPage([job_from_row(page.columns, row) for row in page.rows], page.more)


class MessagePage(NamedTuple):
    messages: list[InboxMessage]
    more: bool


def select_inbox_page(conn: Any, job_id: str, limit: int, *, after: tuple[int, str] | None = None,
                      max_bytes: int) -> MessagePage:
    """A job's inbox, read or not, oldest first from the message after `after` (the
    (sent_at, id) of the last message of the page before): at most `limit` messages
    and, past the first, `max_bytes` of their payloads; a range of `inbox_order`."""
    page = read_page(conn, INBOX_OLDEST_FIRST, ["job_id = ?"], [job_id], limit, past=after, max_bytes=max_bytes)
    return MessagePage([message_from_row(row) for row in page.rows], page.more)
