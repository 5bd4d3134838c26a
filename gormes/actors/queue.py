"""The durable job queue: every command is one read-decide-append transaction.

Each job is an actor with its own stream `job-<id>`; the inline `ledger`
projection (gormes/projections/ledger.py) is the queue's index and is exactly
current with every append, because it is updated inside the append transaction.
A command runs as `store.transact(fn)`: `fn` reads the ledger to find the job(s),
folds their streams, lets the pure rules (gormes/actors/jobs.py) decide, and
appends with the expected version, all in the writer thread under the database
write lock. So a claim can never hand one job to two workers, in this process
or any other.

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

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from gormes.actors.jobs import InvalidJob, InvalidTransition, JobNotFound, LockLost
from gormes.events.jobs import Backoff, JobOptions, Tokens, TranscriptEntry

# Re-exported so that callers need one import.
SubmitOptions = JobOptions
__all__ = [
    "Backoff", "InboxMessage", "InvalidJob", "InvalidTransition", "Job", "JobNotFound",
    "JobQueue", "JobStats", "LockLost", "PruneResult", "SubmitOptions", "Tokens",
    "TranscriptEntry",
]

DEFAULT_LEASE_MS = 30_000
DEFAULT_STALL_GRACE_MS = 15_000
DEFAULT_MAX_DEPTH = 5


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
    coalesced: bool = False  # submit returned an existing job (idempotency / max_waiting)


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
    tokens: Tokens = Tokens()


class PruneResult(msgspec.Struct, kw_only=True):
    ids: list[str]
    dry_run: bool

    @property
    def count(self) -> int:
        return len(self.ids)


class JobQueue:
    """The job queue over an event store (SQLiteEventStore)."""

    def __init__(
        self,
        store: Any,
        *,
        clock: Callable[[], float] = time.time,
        random: Callable[[], float] | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        """Prefer `await JobQueue.open(store)`, which also installs the ledger."""
        raise NotImplementedError("JobQueue is not built yet")

    @classmethod
    async def open(
        cls,
        store: Any,
        *,
        clock: Callable[[], float] = time.time,
        random: Callable[[], float] | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> JobQueue:
        """Create the ledger tables if needed, catch the ledger up with the log and
        install it as an inline projection of `store`; then return the queue."""
        raise NotImplementedError

    # -- submitting and reading ------------------------------------------------

    async def submit(
        self, name: str, data: Any = None, options: JobOptions | Mapping[str, Any] | None = None
    ) -> Job:
        """Add a job (`waiting`, or `delayed` with delay_ms). Raises `InvalidJob`
        (a UserError) for an empty name, unknown or out-of-range options, data that
        is not JSON, an unknown or terminal parent, depth over the cap, or a parent
        at max_children. Returns an existing job with `coalesced=True` when its
        idempotency key is held or the queue is at max_waiting."""
        raise NotImplementedError

    async def get(self, job_id: str) -> Job | None:
        raise NotImplementedError

    async def list(
        self,
        status: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        limit: int = 100,
    ) -> list[Job]:
        """Newest first."""
        raise NotImplementedError

    async def stats(self) -> JobStats:
        raise NotImplementedError

    async def transcript(self, job_id: str) -> list[TranscriptEntry]:
        """The capped transcript the ledger keeps (the log keeps every entry)."""
        raise NotImplementedError

    async def inbox(self, job_id: str) -> list[InboxMessage]:
        """All messages of a job, read or not (operator view; no receipts)."""
        raise NotImplementedError

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
        carries the fresh `lock_token` and `lock_until`."""
        raise NotImplementedError

    async def renew(self, job_id: str, token: str, lease_ms: int = DEFAULT_LEASE_MS) -> bool:
        """Extend the lease; False when the token no longer holds the job."""
        raise NotImplementedError

    async def complete(self, job_id: str, token: str, result: Any = None) -> Job:
        """Finish the attempt. With live children the job goes `waiting-children`
        (and runs again when they are all terminal) instead of `completed`."""
        raise NotImplementedError

    async def fail(
        self, job_id: str, token: str, error: Any, *, unrecoverable: bool = False
    ) -> Job:
        """Record a failed attempt: `delayed` by the backoff, or `dead` when
        unrecoverable or attempts are used up. A non-str error is recorded as str()."""
        raise NotImplementedError

    async def time_out(self, job_id: str, token: str, error: str = "timeout exceeded") -> Job:
        """The handler overran its timeout (or ignored the abort): `dead`, attempts + 1,
        no retry. The worker calls this; `sweep_timeouts` is the wall-clock backstop."""
        raise NotImplementedError

    async def release(self, job_id: str, token: str, reason: str = "") -> Job:
        """Infrastructure abort (shutdown, lease lost): back to `waiting` without
        consuming an attempt."""
        raise NotImplementedError

    async def progress(self, job_id: str, token: str, progress: Any) -> None:
        raise NotImplementedError

    async def add_tokens(
        self, job_id: str, token: str, input: int = 0, output: int = 0, cache_read: int = 0
    ) -> None:
        """Add token deltas (fenced)."""
        raise NotImplementedError

    async def log(self, job_id: str, token: str, entry: TranscriptEntry | str) -> None:
        """Append a transcript entry (fenced)."""
        raise NotImplementedError

    async def read_inbox(self, job_id: str, token: str) -> list[InboxMessage]:
        """Unread messages, marking them read (a receipt event). A second read
        returns nothing new; a wrong token reads nothing."""
        raise NotImplementedError

    # -- operators -------------------------------------------------------------

    async def pause(self, job_id: str) -> Job:
        """waiting, delayed or active -> paused (progress kept). Other states: `InvalidTransition`."""
        raise NotImplementedError

    async def resume(self, job_id: str) -> Job:
        """paused -> waiting (or waiting-children while children are live)."""
        raise NotImplementedError

    async def cancel(self, job_id: str) -> list[str]:
        """Cancel the job and every non-terminal descendant; returns the ids cancelled."""
        raise NotImplementedError

    async def send(self, job_id: str, payload: Any, sender: str = "operator") -> InboxMessage:
        """Put a message in a non-terminal job's inbox. `sender` is "operator" or
        the job's parent id; anyone else is refused."""
        raise NotImplementedError

    async def retry(self, job_id: str) -> Job:
        """failed or dead -> waiting, resetting attempts, error, started_at, stalled_counter."""
        raise NotImplementedError

    async def replay(self, job_id: str, data_overrides: Any = None) -> Job:
        """A terminal job -> a new job with the same name, queue, priority and options,
        data deep-merged with `data_overrides`, no parent."""
        raise NotImplementedError

    async def prune(self, older_than_ms: int, *, dry_run: bool = False) -> PruneResult:
        """Remove terminal jobs that finished more than `older_than_ms` ago from the
        ledger (their streams stay in the log)."""
        raise NotImplementedError

    # -- sweeps (the worker runs these periodically) ------------------------------

    async def sweep_stalled(
        self, now: int | None = None, grace_ms: int = DEFAULT_STALL_GRACE_MS
    ) -> list[str]:
        """Requeue (or kill at max_stalled) active jobs whose lease expired more
        than `grace_ms` ago. Returns the ids handled."""
        raise NotImplementedError

    async def promote_delayed(self, now: int | None = None) -> list[str]:
        raise NotImplementedError

    async def sweep_timeouts(self, now: int | None = None) -> list[str]:
        """Kill jobs active past 2 x timeout (or 2 x lease x max_stalled without one)."""
        raise NotImplementedError

    async def unblock_parents(self) -> list[str]:
        """Return to waiting any parent stranded in waiting-children with no live child."""
        raise NotImplementedError

    # -- waking idle workers -------------------------------------------------------

    @property
    def generation(self) -> int:
        """Changes whenever the log grows (this process or another)."""
        raise NotImplementedError

    async def wait_for_work(self, seen_generation: int) -> None:
        """Return once the log changed after `seen_generation` (milliseconds after a
        submit, in this process or another). Read `generation` BEFORE the claim that
        found nothing, then wait with it."""
        raise NotImplementedError
