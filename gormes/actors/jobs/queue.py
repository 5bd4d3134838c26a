"""The durable job queue: every command is one read-decide-append transaction.

Each job is an actor with its own stream `job-<id>`; the inline `ledger`
projection (gormes/projections/ledger.py) is the queue's index and is exactly
current with every append, because it is updated inside the append transaction.
A command runs as `store.transact(fn)`: `fn` reads the ledger to find the job(s),
folds their streams, lets the pure rules (gormes/actors/jobs/rules.py) decide, and
appends with the expected version, all in the writer thread under the database
write lock (on PostgreSQL, the events table lock every write transaction takes).
So a claim can never hand one job to two workers, in this process or any other,
on this host or any other.

    async with SQLiteEventStore.open(path) as store:
        queue = await JobQueue.open(store)
        job = await queue.submit("echo", {"x": 1})
        claimed = await queue.claim({"echo"}, worker_id="w1")
        await queue.complete(claimed.id, claimed.lock_token, {"x": 1})

Times are milliseconds since the epoch, read from `clock` (seconds, like
`time.time`) by the queue, never by the rules. Holder writes (complete, fail,
progress, add_tokens, log, release, time_out) are fenced by the lock token and
raise `LockLost` when the token is stale; `renew` returns False instead, and
`read_inbox` with a wrong token returns nothing.
"""

from __future__ import annotations

import random as _random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import msgspec

from gormes.actors.jobs import rules
from gormes.actors.jobs.session import JobSession, new_id
from gormes.actors.jobs.views import (
    MESSAGE_COLUMNS, InboxMessage, Job, JobStats, PruneResult, job_from_row, message_from_row,
    JobPage, MessagePage, owned_by, select_inbox_page, select_job, select_job_page, select_jobs,
)
from gormes.actors.jobs.state import InvalidJob, InvalidTransition, JobNotFound, JobState, LockLost
from gormes.actors.jobs.admin import SWEEP_LIMIT, QueueAdmin, deep_merge, json_data, plain
from gormes.actors.jobs.batch import DEFAULT_LEASE_MS, CompleteOutcome, QueueBatches, know_kept
from gormes.events.job_machine import LIVE, TERMINAL
from gormes.events.jobs import (
    MAX_COALESCED, STATUSES, Backoff, JobOptions, Submitter, Tokens, TranscriptEntry,
)
from gormes.events.postgres_sql import SQLITE, dialect_of
from gormes.events.audit_seal import with_seal
from gormes.events.store import EventStore, Transaction
from gormes.projections import ledger, ledger_tokens

# Re-exported so that callers need one import.
SubmitOptions = JobOptions
__all__ = [
    "Backoff", "CompleteOutcome", "InboxMessage", "InvalidJob", "InvalidTransition", "Job", "JobNotFound",
    "JobQueue", "JobStats", "LockLost", "PruneResult", "SubmitOptions", "Submitter", "Tokens",
    "TranscriptEntry",
]

T = TypeVar("T")
DEFAULT_STALL_GRACE_MS = 15_000
DEFAULT_MAX_DEPTH = 5
UNREAD_ONE = "SELECT 1 FROM inbox WHERE job_id = ? AND read_at IS NULL LIMIT 1"  # any unread message?
# A job that ended without a result frees its idempotency key for a new job; a
# live or completed one holds it (a resubmission is given that job).
_KEY_HELD = ledger.status_in(TERMINAL - {"completed"}, negate=True)
_LIVE = ledger.status_in(LIVE)


class JobQueue(QueueBatches, QueueAdmin):
    """The job queue over an event store (SQLiteEventStore or PostgresEventStore).

    Operator commands and sweeps live in `QueueAdmin` (gormes/actors/jobs/admin.py);
    `claim_many` and `complete_many` in `QueueBatches` (gormes/actors/jobs/batch.py)."""

    def __init__(
        self,
        store: EventStore,
        *,
        clock: Callable[[], float] = time.time,
        random: Callable[[], float] | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        """Prefer `await JobQueue.open(store)`, which also installs the ledger; the
        constructor assumes `ledger.install(store)` was already awaited."""
        self.store = store  # the event store the queue runs on, for its callers too
        self.clock = clock
        self.random = random or _random.random
        self.max_depth = max_depth

    @classmethod
    async def open(
        cls,
        store: EventStore,
        *,
        clock: Callable[[], float] = time.time,
        random: Callable[[], float] | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> JobQueue:
        """Create the ledger tables if needed, catch the ledger up with the log and
        install it as an inline projection of `store`; then return the queue."""
        await ledger.install(store)
        return cls(store, clock=clock, random=random, max_depth=max_depth)

    # -- plumbing ----------------------------------------------------------------

    def now_ms(self) -> int:
        """The queue's clock in milliseconds since the epoch: the time its commands
        record, and what a sweep over the ledger's times compares them with."""
        return int(self.clock() * 1000)

    async def _transact(self, fn: Callable[[JobSession], Any], now: int | None = None) -> Any:
        """One command's transaction, with the audit record of the operation call
        that runs the command, if any (gormes/events/audit_seal.py)."""
        return await self.store.transact(
            with_seal(lambda tx: fn(JobSession(tx, self.now_ms() if now is None else now)))
        )

    @staticmethod
    def _job(s: JobSession, job_id: str, *, coalesced: bool = False) -> Job:
        cur = s.tx.execute("SELECT * FROM jobs WHERE id = ?", (job_id,))
        row = cur.fetchone()
        if row is None:
            raise JobNotFound(f"no job {job_id}")
        return job_from_row([d[0] for d in cur.description], row, coalesced=coalesced)

    @staticmethod
    def _existing(s: JobSession, job_id: str) -> None:
        if s.state(job_id) is None:
            raise JobNotFound(f"no job {job_id}")

    async def _read(self, fn: Callable[[Any], Any]) -> Any:
        """Run `fn(conn)` on one of the store's read connections: an sqlite3
        connection, or on PostgreSQL the PostgresLog's `sql` (a PortableConnection
        that runs the same `?` SQL)."""
        return await self.store.read_sql(fn)

    # -- submitting and reading ------------------------------------------------

    async def submit(
        self,
        name: str,
        data: Any = None,
        options: JobOptions | Mapping[str, Any] | None = None,
        *,
        submitter: Submitter | None = None,
        check: Callable[[Transaction], None] | None = None,
        merge_cap: int | None = None,
        waiting_of: tuple[str, str | None] | None = None,
    ) -> Job:
        """Add a job (`waiting`, or `delayed` with delay_ms), recording who submitted
        it (`submitter`: None for a Python caller that names nobody). `check(tx)`: run
        in the transaction, under the write lock, before a new job is recorded (not
        when the submission joins a job), which it may refuse by raising: nothing is
        then written (a gateway's live-jobs cap, gormes/tools/job_trust.py).
        `merge_cap`: the most bytes of JSON a debounced `merge` job's list may hold
        once this submission joins it; past it the submission starts a job of its
        own (a gateway's cap on job data, decision 0074; None: no cap). `waiting_of`:
        the (trust, scope) whose waiting jobs alone `max_waiting` counts and answers
        with (a gateway's or child agent's own, decision 0076; None: the queue's).
        Raises `InvalidJob`
        (a UserError) for an empty name, unknown or out-of-range options, data that
        is not JSON, an unknown or terminal parent, depth over the cap, or a parent
        at max_children. Returns an existing job with `coalesced=True` when its
        idempotency key is held by a live job of the same submitter, its debounce
        key names a job of the same name and submitter still in its window (the
        submission joins it: gormes/actors/jobs/keys.py), or the queue is at
        max_waiting."""
        if not isinstance(name, str) or not name.strip():
            raise InvalidJob("job name must not be empty")
        opts = rules.validate_options(rules.parse_options(options))
        data = json_data(data)
        return await self._transact(
            lambda s: self._submit(
                s, name, data, opts, None, submitter=submitter, check=check, merge_cap=merge_cap,
                waiting_of=waiting_of,
            )
        )

    def submit_in(
        self, tx: Transaction, now: int, name: str, data: Any, options: JobOptions,
        *, submitter: Submitter | None = None,
    ) -> Job:
        """`submit`, inside a transaction the caller runs (`store.transact`), at
        `now` (ms): for a caller whose own decision and the submit must commit
        together (the cron scheduler's fire), where `submit` would open a second
        transaction. `name`, `data` (plain JSON) and `options` are taken as given:
        the caller has checked them (`submit` does it for its callers)."""
        return self._submit(JobSession(tx, now), name, data, options, None, submitter=submitter)

    def _submit(
        self, s: JobSession, name: str, data: Any, opts: JobOptions, replay_of: str | None,
        *, submitter: Submitter | None = None, check: Callable[[Transaction], None] | None = None,
        merge_cap: int | None = None, waiting_of: tuple[str, str | None] | None = None,
    ) -> Job:
        if opts.idempotency_key is not None:
            # A key is its submitter's own: another caller's job holding the same key
            # (a gateway squatting on the operator's) is neither returned nor in the way.
            held = s.ids_where(
                f"SELECT id FROM jobs WHERE idempotency_key = ? AND {_KEY_HELD}"
                " AND coalesce(submitter, '') = ? ORDER BY created_at DESC, id DESC LIMIT 1",
                (opts.idempotency_key, ledger.submitter_json(submitter)),
            )
            if held:
                return self._job(s, held[0], coalesced=True)
        if opts.debounce_key is not None:
            joined = self._join_debounced(s, name, data, opts, submitter, merge_cap)
            if joined is not None:
                return joined
        if opts.max_waiting is not None:
            newest = self._newest_waiting_at_max(s, opts, waiting_of)
            if newest is not None:
                return self._job(s, newest, coalesced=True)
        if check is not None:
            check(s.tx)
        depth = 0
        job_id = new_id()
        if opts.parent_id is not None:
            parent = s.state(opts.parent_id)
            if parent is None:
                raise InvalidJob(f"no parent job {opts.parent_id}")
            depth = parent.depth + 1
            if depth > self.max_depth:
                raise InvalidJob(f"job depth {depth} exceeds the cap of {self.max_depth}")
        s.run(job_id, rules.Submit(
            now=s.now, job_id=job_id, name=name, data=data, options=opts, depth=depth,
            replay_of=replay_of, submitter=submitter,
        ))
        if opts.parent_id is not None:
            s.run(opts.parent_id, rules.AddChild(now=s.now, child_id=job_id))
        return self._job(s, job_id)

    @staticmethod
    def _newest_waiting_at_max(s: JobSession, opts: JobOptions, owner: tuple[str, str | None] | None) -> str | None:
        """The newest waiting job of the queue when it already holds `max_waiting`
        waiting jobs, else None. With `owner` (trust, scope) only that owner's waiting
        jobs are counted and answered with (decision 0076): a gateway learns nothing
        of the queue's depth but its own. Without, every waiting job of the queue is,
        counted in `jobs_status` (status, queue), no row read to count."""
        where, params = ["status = 'waiting'", "queue = ?"], [opts.queue]
        jobs = "jobs"
        if owner is not None:
            # Its waiting jobs are among its class's live ones: `jobs_capped_live`'s
            # WHERE, term for term, lets the database read that index's entries.
            d = dialect_of(s.tx)
            terms, more = owned_by(s.tx, owner)
            where, params = [ledger.capped_live(d), *where, *terms], [*params, *more]
            if d == SQLITE:
                # Without statistics SQLite would take `jobs_capped_owned` (two
                # equalities to one): the owner's every job, ended ones too, where
                # the class's live ones are at most its cap. PostgreSQL weighs both.
                jobs = "jobs INDEXED BY jobs_capped_live"
        waiting = " AND ".join(where)
        [(count,)] = s.rows(f"SELECT count(*) FROM {jobs} WHERE {waiting}", params)
        if count < opts.max_waiting:  # type: ignore[operator]
            return None
        return s.ids_where(f"SELECT max(id) FROM {jobs} WHERE {waiting}", params)[0]

    def _join_debounced(
        self, s: JobSession, name: str, data: Any, opts: JobOptions, submitter: Submitter | None,
        merge_cap: int | None = None,
    ) -> Job | None:
        """The debounced job this submission joins (`job.coalesced` on its stream),
        or None: no job of this name, key and submitter is waiting out its window
        (or the one that is has taken MAX_COALESCED submissions, or is a `merge`
        job whose list would pass `merge_cap` bytes of JSON with it)."""
        pending = s.ids_where(
            "SELECT id FROM jobs WHERE debounce_key = ? AND name = ? AND status = 'delayed'"
            " AND attempts_started = 0 AND delay_until > ? AND submissions < ?"
            " AND coalesce(submitter, '') = ? ORDER BY created_at DESC, id DESC LIMIT 1",
            (opts.debounce_key, name, s.now, MAX_COALESCED, ledger.submitter_json(submitter)),
        )
        if not pending or not self._merge_fits(s.state(pending[0]), data, merge_cap):
            return None
        s.run(pending[0], rules.Coalesce(now=s.now, data=data, submitter=submitter))
        return self._job(s, pending[0], coalesced=True)

    @staticmethod
    def _merge_fits(job: JobState | None, data: Any, merge_cap: int | None) -> bool:
        """Whether `data` may join `job`: always, but for a `merge` job under a
        `merge_cap`, whose list with it (a comma and its JSON more) must stay within."""
        if merge_cap is None or job is None or job.options.debounce_mode != "merge":
            return True
        return len(msgspec.json.encode(job.data)) + 1 + len(msgspec.json.encode(data)) <= merge_cap

    async def get(self, job_id: str) -> Job | None:
        return await self._read(lambda conn: select_job(conn, job_id))

    async def list(
        self,
        status: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        limit: int = 100,
        *,
        owner: tuple[str, str | None] | None = None,
    ) -> list[Job]:
        """Newest first; with `owner` (trust, scope), only jobs whose submitter has both."""
        return await self._read(lambda conn: select_jobs(conn, status, queue, name, limit, owner))

    async def list_page(
        self,
        status: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        limit: int = 100,
        *,
        owner: tuple[str, str | None] | None = None,
        before: tuple[int, str] | None = None,
        max_bytes: int,
    ) -> JobPage:
        """`list` a page at a time: the jobs after `before` (created_at, id), at most
        `limit` of them and `max_bytes` of their data, results, progress and errors
        (at least one job, whatever its size), and whether more follow; the rows past
        the page are not read (`select_job_page`)."""
        return await self._read(
            lambda conn: select_job_page(
                conn, status, queue, name, limit, owner, before=before, max_bytes=max_bytes
            )
        )

    async def live_count(self, trust: str) -> int:
        """How many jobs submitted by callers of the `trust` class are not terminal."""
        return await self._read(lambda conn: self.live_count_in(conn, trust))

    @staticmethod
    def live_count_in(conn: Any, trust: str) -> int:
        """`live_count`, through `conn`: a read connection, or a `Transaction`, where
        the ledger is exact with every append before it (even of the same commit).

        A capped class's count (the live-jobs cap's, made under the write lock) reads
        the class's entries of `jobs_capped_live` and nothing else: its WHERE is the
        index's, term for term, so that both databases use it. An uncapped class's
        jobs are not in that index: its count reads every live job."""
        d = dialect_of(conn)
        trust_sql = ledger.submitter_trust(d)
        live = _LIVE if trust in ledger.UNCAPPED else ledger.capped_live(d)
        sql = f"SELECT count(*) FROM jobs WHERE {live} AND {trust_sql} = ?"
        return int(conn.execute(sql, (trust,)).fetchone()[0])

    async def stats(self) -> JobStats:
        def read(conn: Any) -> JobStats:
            by_status = {status: 0 for status in STATUSES}
            by_queue: dict[str, dict[str, int]] = {}
            total = 0
            for queue, status, n in conn.execute(
                "SELECT queue, status, count(*) FROM jobs GROUP BY queue, status"
            ):
                by_status[status] = by_status.get(status, 0) + n
                by_queue.setdefault(queue, {})[status] = n
                total += n
            models = ledger_tokens.totals(conn)  # a row per model, whatever the number of jobs
            return JobStats(
                total=total, by_status=by_status, by_queue=by_queue,
                tokens=sum((m.spent for m in models), Tokens()),
                wasted=sum((m.wasted for m in models), Tokens()),
            )

        return await self._read(read)

    async def transcript(self, job_id: str) -> list[TranscriptEntry]:
        """The capped transcript the ledger keeps (the log keeps every entry)."""
        def read(conn: Any) -> list[TranscriptEntry]:
            rows = conn.execute(
                "SELECT kind, text, data FROM transcript WHERE job_id = ? ORDER BY seq", (job_id,)
            ).fetchall()
            return [
                TranscriptEntry(kind=k, text=t or "", data=None if d is None else plain.decode(d))
                for k, t, d in rows
            ]

        return await self._read(read)

    async def inbox_page(self, job_id: str, limit: int, *, after: tuple[int, str] | None = None,
                         max_bytes: int) -> MessagePage:
        """`inbox` a page at a time, oldest first: the messages after `after` (sent_at,
        id), at most `limit` of them and `max_bytes` of their payloads (at least one
        message), and whether more follow; the rows past the page are not read."""
        return await self._read(lambda conn: select_inbox_page(conn, job_id, limit, after=after, max_bytes=max_bytes))

    async def inbox(self, job_id: str) -> list[InboxMessage]:
        """All messages of a job, read or not (operator view; no receipts)."""
        def read(conn: Any) -> list[InboxMessage]:
            rows = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM inbox WHERE job_id = ? ORDER BY sent_at, id",
                (job_id,),
            ).fetchall()
            return [message_from_row(row) for row in rows]

        return await self._read(read)

    # -- the holder (a worker) ---------------------------------------------------

    async def claim(
        self,
        names: Iterable[str],
        queues: Iterable[str] | None = None,
        worker_id: str = "",
        lease_ms: int = DEFAULT_LEASE_MS,
    ) -> Job | None:
        """Claim the next waiting job with one of `names` (in `queues`, default all),
        by priority then age. Due delayed jobs are promoted first. The returned Job
        carries the fresh `lock_token` and `lock_until`. (`claim_many` claims
        several in one transaction.)"""
        jobs = await self.claim_many(names, queues, worker_id, lease_ms, limit=1)
        return jobs[0] if jobs else None

    async def renew(self, job_id: str, token: str, lease_ms: int = DEFAULT_LEASE_MS) -> bool:
        """Extend the lease; False when the token no longer holds the job."""
        def renew(s: JobSession) -> bool:
            try:
                s.run(job_id, rules.Renew(now=s.now, token=token, lease_ms=lease_ms))
            except (LockLost, InvalidTransition):
                return False
            return True

        return await self._transact(renew)

    async def _holder_command(self, job_id: str, make: Callable[[int], rules.Command]) -> Job | None:
        def run(s: JobSession) -> Job | None:
            self._existing(s, job_id)
            s.run(job_id, make(s.now))
            try:
                return self._job(s, job_id)
            except JobNotFound:
                state = s.state(job_id)
                if state is not None and state.terminal:
                    return None  # remove_on_complete / remove_on_fail took it out
                raise

        return await self._transact(run)

    async def _as_holder(self, job_id: str, fn: Callable[[JobSession], T], *, held: bool = False) -> T:
        """`fn` in a transaction, for a write by the job's holder (its tokens, log,
        inbox read: an agent job's every step): the session starts from the state
        kept of the job (its claim's or its last such write's) and folds only what
        was appended since; the state the write left is kept once it committed (not
        before: a rolled-back write's state could match a later stream of the same
        version). `held`: the commit waited for whatever cancel comes."""
        kept = self.kept_state(job_id)

        def run(tx: Transaction) -> tuple[T, JobState | None]:
            s = JobSession(tx, self.now_ms())
            if kept is not None:
                know_kept(s, [kept])
            return fn(s), s.known(job_id)

        value, after = await (self.store.transact_held(run) if held else self.store.transact(run))
        if after is not None:
            self._keep_states([after])
        return value

    async def _holder_write(self, job_id: str, make: Callable[[int], rules.Command]) -> None:
        """`_holder_command` for a write whose caller wants no Job back (tokens, log,
        progress: an agent job's every turn), so the ledger row is not read back."""
        def write(s: JobSession) -> None:
            self._existing(s, job_id)
            s.run(job_id, make(s.now))

        await self._as_holder(job_id, write)

    async def complete(self, job_id: str, token: str, result: Any = None) -> Job | None:
        """Finish the attempt. With live children the job goes `waiting-children`
        (and runs again when they are all terminal) instead of `completed`.
        Returns None when remove_on_complete took the job out of the ledger."""
        result = json_data(result, "job result")
        return await self._holder_command(
            job_id, lambda now: rules.Complete(now=now, token=token, result=result)
        )

    async def fail(
        self, job_id: str, token: str, error: Any, *, unrecoverable: bool = False
    ) -> Job | None:
        """Record a failed attempt: `delayed` by the backoff, or `dead` when
        unrecoverable or attempts are used up. A non-str error is recorded as str().
        Returns None when remove_on_fail took the job out of the ledger."""
        text = error if isinstance(error, str) else str(error)
        draw = self.random()
        return await self._holder_command(job_id, lambda now: rules.Fail(
            now=now, token=token, error=text, unrecoverable=unrecoverable, jitter_draw=draw
        ))

    async def time_out(
        self, job_id: str, token: str, error: str = "timeout exceeded"
    ) -> Job | None:
        """The handler overran its timeout (or ignored the abort: pass "handler
        ignored abort"): `dead`, attempts + 1, no retry. The worker calls this;
        `sweep_timeouts` is the wall-clock backstop."""
        return await self._holder_command(
            job_id, lambda now: rules.TimeOut(now=now, token=token, error=error)
        )

    async def release(self, job_id: str, token: str, reason: str = "") -> Job:
        """Infrastructure abort (shutdown, lease lost): back to `waiting` without
        consuming an attempt."""
        job = await self._holder_command(
            job_id, lambda now: rules.Release(now=now, token=token, reason=reason)
        )
        assert job is not None
        return job

    async def progress(self, job_id: str, token: str, progress: Any) -> None:
        progress = json_data(progress, "progress")
        await self._holder_write(
            job_id, lambda now: rules.Progress(now=now, token=token, progress=progress)
        )

    async def add_tokens(
        self, job_id: str, token: str, input: int = 0, output: int = 0, cache_read: int = 0,
        cache_write: int = 0, reasoning: int = 0, model: str | None = None,
    ) -> None:
        """Add token deltas (fenced), spent on `model` if given."""
        tokens = Tokens(input=input, output=output, cache_read=cache_read, cache_write=cache_write,
                        reasoning=reasoning)
        await self._holder_write(
            job_id, lambda now: rules.AddTokens(now=now, token=token, tokens=tokens, model=model)
        )

    async def add_tokens_many(self, job_id: str, token: str, tokens: Sequence[tuple[Tokens, str | None]]) -> None:
        """`add_tokens` of each (deltas, model), in one transaction."""
        await self._as_holder(job_id, lambda s: self._add_tokens_in(s, job_id, token, tokens))

    def _add_tokens_in(self, s: JobSession, job_id: str, token: str,
                       tokens: Sequence[tuple[Tokens, str | None]]) -> None:
        self._existing(s, job_id)
        for delta, model in tokens:
            s.run(job_id, rules.AddTokens(now=s.now, token=token, tokens=delta, model=model))

    async def log(self, job_id: str, token: str, entry: TranscriptEntry | str) -> None:
        """Append a transcript entry (fenced)."""
        if isinstance(entry, str):
            entry = TranscriptEntry(kind="log", text=entry)
        entry = TranscriptEntry(
            kind=entry.kind, text=entry.text, data=json_data(entry.data, "transcript data")
        )
        await self._holder_write(
            job_id, lambda now: rules.Transcribe(now=now, token=token, entry=entry)
        )

    async def read_inbox(
        self, job_id: str, token: str, tokens: Sequence[tuple[Tokens, str | None]] = (),
    ) -> list[InboxMessage]:
        """Unread messages, marking them read (a receipt event). A second read
        returns nothing new; a wrong token reads nothing. `tokens`: (deltas, model)
        added first, fenced, in the same transaction (LockLost as `add_tokens`)."""
        return await self._as_holder(job_id, lambda s: self._read_inbox_in(s, job_id, token, tokens))

    async def read_inbox_with(
        self, job_id: str, token: str, tokens: Sequence[tuple[Tokens, str | None]],
        also: Callable[[Transaction, list[InboxMessage]], T],
    ) -> T:
        """`read_inbox`, then `also(tx, messages)` in the same transaction (a run's
        own inbox receipt: live.py), its commit waited for whatever cancel comes
        (`transact_held`): messages marked read here are never lost to a cancel
        between the job's read and the reader's record of them."""
        return await self._as_holder(
            job_id, lambda s: also(s.tx, self._read_inbox_in(s, job_id, token, tokens)), held=True)

    def _read_inbox_in(
        self, s: JobSession, job_id: str, token: str, tokens: Sequence[tuple[Tokens, str | None]],
    ) -> list[InboxMessage]:
        if tokens:
            self._add_tokens_in(s, job_id, token, tokens)
        # An agent job reads its inbox before every turn, nearly always empty. Its
        # state is usually known already (kept from its last write, the stream not
        # moved since; or folded by the tokens' write): nothing unread there is
        # nothing to decide, and no SQL runs, so the read shares the batch's INSERT.
        # Otherwise nothing unread in the ledger (inline: current in this
        # transaction) spares folding the job's stream.
        known = s.known(job_id)
        if known is not None:
            if not known.unread:
                return []
        elif not s.rows(UNREAD_ONE, (job_id,)) or s.state(job_id) is None:
            return []
        events = s.run(job_id, rules.ReadInbox(now=s.now, token=token))
        if not events:
            return []
        ids = events[0].message_ids  # type: ignore[attr-defined]
        rows = s.rows(
            f"SELECT {MESSAGE_COLUMNS} FROM inbox WHERE id IN ({','.join('?' * len(ids))})"
            " ORDER BY sent_at, id", ids,
        )
        return [message_from_row(row) for row in rows]

    # -- waking idle workers -------------------------------------------------------

    @property
    def generation(self) -> int:
        """Changes whenever the log grows (this process or another)."""
        return self.store.generation

    async def wait_for_work(self, seen_generation: int) -> None:
        """Return once the log changed after `seen_generation` (milliseconds after a
        submit, in this process or another). Read `generation` BEFORE the claim that
        found nothing, then wait with it."""
        await self.store.wait_for_change(seen_generation)


__all__ += ["deep_merge", "SWEEP_LIMIT"]
