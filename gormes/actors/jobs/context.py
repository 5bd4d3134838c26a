"""`JobContext`: what a running handler gets as `ctx`.

Every write goes through the queue fenced by the lock token the worker claimed
the job with, so a handler that lost its lease changes nothing; the first such
refusal also aborts the handler (the worker cancels it as "lease lost").

The handler is cancelled (trio.Cancelled) when the job is paused or cancelled,
when it runs past its timeout, when its lease is lost, when the worker shuts
down, or when the resource governor trips its memory breaker; `abort_reason`
then says which.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from gormes.actors.jobs.state import LockLost
from gormes.events.jobs import Submitter, Tokens, TranscriptEntry

if TYPE_CHECKING:
    from gormes.actors.jobs.queue import InboxMessage, Job, JobQueue
    from gormes.events.store import EventStore, Transaction

T = TypeVar("T")


class JobContext:
    def __init__(
        self,
        queue: JobQueue,
        job: Job,
        *,
        on_lock_lost: Callable[[], None] | None = None,
    ) -> None:
        if job.lock_token is None:
            raise ValueError(f"job {job.id} was not claimed: no lock token")
        self._queue = queue
        self._job = job
        self._on_lock_lost = on_lock_lost
        self.abort_reason: str | None = None
        self._later: list[tuple[Tokens, str | None]] = []  # tokens_later's, not yet written

    # -- what the job is --------------------------------------------------------

    @property
    def id(self) -> str:
        return self._job.id

    @property
    def name(self) -> str:
        return self._job.name

    @property
    def data(self) -> Any:
        return self._job.data

    @property
    def attempts_made(self) -> int:
        return self._job.attempts_made

    @property
    def attempts_started(self) -> int:
        """The job's claims so far, this attempt's included (1: its first)."""
        return self._job.attempts_started

    @property
    def lock_token(self) -> str:
        assert self._job.lock_token is not None
        return self._job.lock_token

    @property
    def queue(self) -> str:
        return self._job.queue

    @property
    def priority(self) -> int:
        return self._job.priority

    @property
    def parent_id(self) -> str | None:
        return self._job.parent_id

    @property
    def submitter(self) -> Submitter | None:
        """Who submitted the job (None: not recorded, e.g. an older log)."""
        return self._job.submitter

    @property
    def store(self) -> EventStore:
        """The event store the job's queue runs on: a handler reads its job's
        stream there, or records a run of its own (the `agent` handler)."""
        return self._queue.store

    # -- what the handler may do ------------------------------------------------

    async def progress(self, progress: Any) -> None:
        """Record progress: a dict like {step, total, message, ...} or any JSON."""
        await self._fenced(self._queue.progress(self.id, self.lock_token, progress))

    async def tokens(self, input: int = 0, output: int = 0, cache_read: int = 0, cache_write: int = 0,
                     reasoning: int = 0, *, model: str | None = None) -> None:
        """Add token usage deltas to the job's totals (`cache_read`, `cache_write`:
        parts of `input`; `reasoning`: part of `output`), spent on `model` if given
        (the ledger keeps per-model totals to price them: decision 0035)."""
        await self._fenced(
            self._queue.add_tokens(
                self.id, self.lock_token, input=input, output=output, cache_read=cache_read,
                cache_write=cache_write, reasoning=reasoning, model=model,
            )
        )

    def tokens_later(self, tokens: Tokens, *, model: str | None = None) -> None:
        """`tokens`, written with the job's next `inbox()` read (one transaction for
        both) or at `flush_tokens()`: what an agent job's run reports after every
        model turn, right before its next inbox read (decision 0025)."""
        self._later.append((tokens, model))

    @property
    def tokens_waiting(self) -> int:
        """How many `tokens_later` reports are not written yet."""
        return len(self._later)

    async def flush_tokens(self) -> None:
        """Write what `tokens_later` holds (nothing if it holds nothing)."""
        later, self._later = self._later, []
        if later:
            await self._fenced(self._queue.add_tokens_many(self.id, self.lock_token, later))

    async def log(self, text: str, *, kind: str = "log", data: Any = None) -> None:
        """Append a transcript entry (kind: log, tool_call, llm_turn or error)."""
        entry = TranscriptEntry(kind=kind, text=text, data=data)  # type: ignore[arg-type]
        await self._fenced(self._queue.log(self.id, self.lock_token, entry))

    async def inbox(self) -> list[InboxMessage]:
        """Unread messages (child_done, operator or parent messages), marked read;
        the tokens `tokens_later` holds are written first, in the same transaction."""
        later, self._later = self._later, []
        if not later:
            return await self._queue.read_inbox(self.id, self.lock_token)
        return await self._fenced(self._queue.read_inbox(self.id, self.lock_token, tokens=later))  # type: ignore[no-any-return]

    async def inbox_with(self, also: Callable[[Transaction, list[InboxMessage]], T]) -> T:
        """`inbox()`, then `also(tx, messages)` in the same transaction, its commit
        waited for whatever cancel comes: a run's own inbox receipt (live.py), so
        that an agent job's step waits for one commit, not two (decision 0025).
        `also` runs in the store's writer; what it raises undoes both."""
        later, self._later = self._later, []
        return await self._fenced(self._queue.read_inbox_with(self.id, self.lock_token, later, also))  # type: ignore[no-any-return]

    async def spawn(
        self, name: str, data: Any = None, options: Mapping[str, Any] | None = None
    ) -> Job:
        """Submit a child job; this job waits for its children after it returns.
        The child is this job's submitter's work: it records the same submitter."""
        merged = dict(options or {})
        merged["parent_id"] = self.id
        return await self._queue.submit(name, data, merged, submitter=self.submitter)

    async def _fenced(self, write: Any) -> Any:
        try:
            return await write
        except LockLost:
            if self._on_lock_lost is not None:
                self._on_lock_lost()
            raise
