"""Holder commands for many jobs in one transaction (mixed into `JobQueue`).

`claim_many` claims up to `limit` jobs and `complete_many` completes many: each is
one `store.transact`, so the jobs' streams are read in one query, their events
inserted together and the ledger updated in one pass, where one call per job
pays all of that per job. The rules are the same ones, applied to each job in
turn under the same write lock, so nothing differs from calling `claim` or
`complete` that many times in a row; see gormes/actors/jobs/queue.py.

`complete_and_claim` is `complete_many` then `claim_many` in one transaction: a
worker whose jobs finish together records them and fills the slots they free
with one commit instead of two.

A claim passes over a waiting job whose concurrency key already has as many
jobs held as the job's limit (decision 0032), in the claim's own transaction:
on SQLite under the write lock, on PostgreSQL under the events table lock every
write transaction takes (decision 0008), so the count it reads is the count.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from gormes.actors.jobs import rules
from gormes.actors.jobs.session import JobSession
from gormes.actors.jobs.views import Job, job_from_row, job_from_state
from gormes.actors.jobs.state import InvalidJob, JobError, JobNotFound, JobState
from gormes.actors.jobs.admin import json_data, promote_due
from gormes.events.job_machine import CLAIMABLE
from gormes.projections.ledger import status_in

DEFAULT_LEASE_MS = 30_000
_CLAIMABLE = status_in(CLAIMABLE)  # `status = 'waiting'`: the partial index jobs_waiting's own test

# What `complete_many` gives back per item: the job, None (removed on completion),
# or the error that `complete` would have raised for it.
CompleteOutcome = Job | None | JobError


# Per-key concurrency (decision 0032). A job's key is held while a worker holds one
# of its jobs (a lock token is set exactly then); each count reads the partial
# index `jobs_key_held`, which has only held keyed jobs in it.
_ANY_KEY_HELD = "SELECT 1 FROM jobs WHERE concurrency_key IS NOT NULL AND lock_token IS NOT NULL LIMIT 1"
_HELD_OF_KEY = "SELECT count(*) FROM jobs WHERE concurrency_key = ? AND lock_token IS NOT NULL"
# A waiting job whose key is held by as many jobs as its limit is passed over.
_UNDER_LIMIT = (
    " AND (concurrency_key IS NULL OR concurrency_limit > (SELECT count(*) FROM jobs AS held"
    " WHERE held.concurrency_key = jobs.concurrency_key AND held.lock_token IS NOT NULL))"
)


def claim_sql(
    names: Sequence[str], queues: Sequence[str] | None, *, keyed: bool = False
) -> tuple[str, list[Any]]:
    """The next waiting jobs with one of `names` (in `queues`, None: all), by
    priority then age; the LIMIT is the last parameter, left to the caller. With
    `keyed` (some keyed job is held), not the jobs whose concurrency key is at
    their limit."""
    sql = f"SELECT id FROM jobs WHERE {_CLAIMABLE} AND name IN ({','.join('?' * len(names))})"
    params: list[Any] = list(names)
    if queues is not None:
        sql += f" AND queue IN ({','.join('?' * len(queues))})"
        params += queues
    if keyed:
        sql += _UNDER_LIMIT
    return sql + " ORDER BY priority, created_at, id LIMIT ?", params


def jobs_by_id(s: JobSession, job_ids: Sequence[str]) -> dict[str, Job]:
    """The ledger rows of `job_ids` (those that exist), read in one query."""
    if not job_ids:
        return {}
    cur = s.tx.execute(
        f"SELECT * FROM jobs WHERE id IN ({','.join('?' * len(job_ids))})", list(job_ids)
    )
    columns = [d[0] for d in cur.description]
    jobs = (job_from_row(columns, row) for row in cur.fetchall())
    return {job.id: job for job in jobs}


class QueueBatches:
    """`claim_many`, `complete_many` and `complete_and_claim`."""

    if TYPE_CHECKING:  # provided by JobQueue
        async def _transact(self, fn: Callable[[JobSession], Any], now: int | None = None) -> Any: ...

    async def claim_many(
        self,
        names: Iterable[str],
        queues: Iterable[str] | None = None,
        worker_id: str = "",
        lease_ms: int = DEFAULT_LEASE_MS,
        limit: int = 1,
    ) -> list[Job]:
        """Claim up to `limit` waiting jobs with one of `names` (in `queues`, default
        all), by priority then age, in one transaction; due delayed jobs are
        promoted first. Each returned Job carries its own fresh `lock_token`."""
        claim = _claimer(names, queues, worker_id, lease_ms, limit)
        if claim is None:
            return []
        jobs, states = await self._transact(claim)
        self._keep_states(states)
        return jobs

    async def complete_many(
        self, items: Sequence[tuple[str, str, Any]]
    ) -> list[CompleteOutcome]:
        """Complete many jobs, `(job_id, token, result)` each, in one transaction.

        Each item has exactly the outcome `complete` would give it, in the list
        returned at its index: the Job, None when remove_on_complete took it out of
        the ledger, or the error `complete` would raise (LockLost for a stale
        token, JobNotFound, InvalidJob for a result that is not JSON). An item
        refused changes nothing and does not affect the others."""
        outcomes, todo = _completable(items)
        if not todo:
            return outcomes
        known = self._known_states(todo)

        def run(s: JobSession) -> list[CompleteOutcome]:
            know_kept(s, known)
            return _complete_in(s, todo, outcomes)

        return await self._transact(run)

    async def complete_and_claim(
        self,
        items: Sequence[tuple[str, str, Any]],
        names: Iterable[str],
        queues: Iterable[str] | None = None,
        worker_id: str = "",
        lease_ms: int = DEFAULT_LEASE_MS,
        limit: int = 1,
        *,
        rows: bool = True,
    ) -> tuple[list[CompleteOutcome], list[Job]]:
        """`complete_many(items)` then `claim_many(names, queues, worker_id,
        lease_ms, limit)` in ONE transaction (one commit): what a worker does when
        jobs finish and it takes new ones for the slots they free.

        The outcomes and the claimed jobs are exactly those of the two calls made
        one after the other; if the transaction fails, neither happened. With
        `rows=False` an item completed has the outcome None instead of its Job
        (the ledger rows are not read back; the refusals are the same)."""
        outcomes, todo = _completable(items)
        claim = _claimer(names, queues, worker_id, lease_ms, limit)

        known = self._known_states(todo)

        def run(s: JobSession) -> tuple[list[CompleteOutcome], tuple[list[Job], list[JobState]]]:
            if todo:
                know_kept(s, known)
                _complete_in(s, todo, outcomes, rows)
            return outcomes, ([], []) if claim is None else claim(s)

        if not todo and claim is None:
            return outcomes, []
        outcomes, (jobs, states) = await self._transact(run)
        self._keep_states(states)
        return outcomes, jobs

    # States of the jobs this queue holds, as their claims or their holder's last
    # writes left them: completing one, or writing its tokens, needs no fold of its
    # stream while nothing was appended to it since, and only of the tail if
    # something was (`JobSession.know` checks the version). Taken by the
    # completion; past a bound the least recently kept go first (jobs that ended
    # otherwise, or more in flight than the bound: a `--concurrency 10000` worker
    # keeps them all).
    _KEEP_STATES = 16_384

    def _keep_states(self, states: list[JobState]) -> None:
        kept = self.__dict__.get("_claimed_states")
        if kept is None:
            kept = self.__dict__["_claimed_states"] = OrderedDict()
        for state in states:
            kept[state.id] = state
            kept.move_to_end(state.id)
        while len(kept) > self._KEEP_STATES:
            kept.popitem(last=False)

    def kept_state(self, job_id: str) -> JobState | None:
        """The job's state as its claim or its holder's last write left it, if kept."""
        kept = self.__dict__.get("_claimed_states")
        return None if not kept else kept.get(job_id)

    def _known_states(self, todo: Todo) -> list[JobState]:
        kept = self.__dict__.get("_claimed_states")
        if not kept:
            return []
        return [state for _, job_id, _, _ in todo if (state := kept.pop(job_id, None)) is not None]


Todo = list[tuple[int, str, str, Any]]


def know_kept(s: JobSession, states: list[JobState]) -> None:
    # Checking a version is a lookup in SQLite's version cache (while no other
    # process wrote); PostgreSQL would ask its server once per job, where reading
    # the streams is one query: there the streams are read.
    if states and getattr(s.tx, "dialect", "sqlite") == "sqlite":
        s.know(states)


def _completable(items: Sequence[tuple[str, str, Any]]) -> tuple[list[CompleteOutcome], Todo]:
    """The items' outcomes so far (InvalidJob for a result that is not JSON) and
    the items left to write, with their index and plain result."""
    outcomes: list[CompleteOutcome] = [None] * len(items)
    todo: Todo = []
    for i, (job_id, token, result) in enumerate(items):
        try:
            plain = json_data(result, "job result")
        except InvalidJob as exc:
            outcomes[i] = exc
            continue
        todo.append((i, job_id, token, plain))
    return outcomes, todo


def _complete_in(
    s: JobSession, todo: Todo, outcomes: list[CompleteOutcome], rows: bool = True
) -> list[CompleteOutcome]:
    s.preload([job_id for _, job_id, _, _ in todo])
    done: list[tuple[int, str]] = []
    for i, job_id, token, result in todo:
        appends = s.appends
        try:
            if s.state(job_id) is None:
                raise JobNotFound(f"no job {job_id}")
            s.run(job_id, rules.Complete(now=s.now, token=token, result=result))
        except JobError as exc:
            if s.appends != appends:  # refused half-way: undo the whole batch
                raise
            outcomes[i] = exc
        else:
            done.append((i, job_id))
    done_ids = [job_id for _, job_id in done]
    if rows:
        found = jobs_by_id(s, done_ids)
        for i, job_id in done:
            outcomes[i] = _completed(s, job_id, found)
    else:
        present = set(s.ids_where(
            f"SELECT id FROM jobs WHERE id IN ({','.join('?' * len(done_ids))})", done_ids
        )) if done_ids else set()
        for i, job_id in done:
            _completed(s, job_id, {}, job_id in present)
            outcomes[i] = None
    return outcomes


def _claimer(
    names: Iterable[str], queues: Iterable[str] | None, worker_id: str, lease_ms: int, limit: int
) -> Callable[[JobSession], tuple[list[Job], list[JobState]]] | None:
    """The body of a claim of up to `limit` jobs (None: nothing could be claimed);
    the arguments are checked here, before any transaction."""
    names = sorted(set(names))
    queues = None if queues is None else sorted(set(queues))
    if not names or queues == []:
        return None
    if lease_ms <= 0:
        raise InvalidJob("lease_ms must be > 0")
    if limit < 1:
        raise InvalidJob("limit must be >= 1")
    sql, params = claim_sql(names, queues)
    keyed_sql, _ = claim_sql(names, queues, keyed=True)

    def claim(s: JobSession) -> tuple[list[Job], list[JobState]]:
        promote_due(s)
        claimed: list[str] = []
        held: dict[str, int] = {}  # each key's held jobs, this round's claims included
        # Each pass claims at least one job it finds: the first job of each key in
        # it is under its limit (the SQL said so, over the ledger as it is now).
        for _ in range(limit):
            keyed = bool(s.rows(_ANY_KEY_HELD))
            found = s.ids_where(keyed_sql if keyed else sql, (*params, limit - len(claimed)))
            s.preload(found)
            # One draw for the pass's lock tokens (16 random bytes each, in hex).
            tokens = secrets.token_hex(16 * len(found))
            passed_over = False
            for i, job_id in enumerate(found):
                if not _slot_free(s, job_id, held):
                    passed_over = True  # its key filled up in this pass
                    continue
                s.run(job_id, rules.Claim(
                    now=s.now, worker_id=worker_id, lock_token=tokens[32 * i : 32 * i + 32],
                    lease_ms=lease_ms,
                ))
                claimed.append(job_id)
            if not passed_over or len(claimed) == limit:
                break
        states = [state for job_id in claimed if (state := s.state(job_id)) is not None]
        return [job_from_state(state) for state in states], states

    return claim


def _slot_free(s: JobSession, job_id: str, held: dict[str, int]) -> bool:
    """Whether `job_id`'s concurrency key (if any) has a free slot; if so, take it."""
    state = s.state(job_id)
    key = None if state is None else state.options.concurrency_key
    if key is None:
        return True
    n = held.get(key)
    if n is None:
        [(n,)] = s.rows(_HELD_OF_KEY, (key,))
        n = int(n)
    if n >= (state.options.concurrency_limit or 1):  # type: ignore[union-attr]
        held[key] = n
        return False
    held[key] = n + 1
    return True


def _completed(
    s: JobSession, job_id: str, rows: dict[str, Job], in_ledger: bool = False
) -> Job | None:
    """What `complete` returns once its events are appended (`in_ledger`: the row
    is known to be there, not read)."""
    job = rows.get(job_id)
    if job is not None or in_ledger:
        return job
    state = s.state(job_id)
    if state is not None and state.terminal:
        return None  # remove_on_complete took it out of the ledger
    # The ledger lost a live job: `complete` raises here, undoing its writes; so
    # does this, for the whole batch.
    raise JobNotFound(f"no job {job_id}")
