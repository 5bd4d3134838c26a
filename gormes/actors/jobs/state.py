"""The job actor's pure state and `evolve`, and the job queue's errors.

No I/O, no clock, no randomness: the time (`now`, ms since the epoch) and any
random draw (backoff jitter) arrive on the command. `decide` lives in
gormes/actors/jobs/rules.py; the public API is gormes/actors/jobs/queue.py.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gormes.errors import GormesError, UserError
from gormes.events.jobs import (
    TERMINAL, JobAwaitingChildren, JobCancelled, JobChildAdded, JobChildDone,
    JobChildrenSettled, JobClaimed, JobCompleted, JobFailed, JobInboxRead, JobLeaseRenewed,
    JobMessageSent, JobOptions, JobPaused, JobProgressed, JobPromoted, JobPruned,
    JobReleased, JobResumed, JobRetried, JobStalled, JobSubmitted, JobTimedOut,
    JobTokensAdded, JobTranscribed, Submitter, Tokens,
)


class JobError(GormesError):
    """Base of the job queue's errors."""


class InvalidJob(UserError, JobError):
    """A submit (or replay) that cannot be accepted: bad name, options or data."""


class JobNotFound(UserError, JobError):
    """No job with that id."""


class InvalidTransition(UserError, JobError):
    """The job is not in a state that allows the command (pause a completed job...)."""


class LockLost(JobError):
    """The lock token no longer holds the job: a stale holder changes nothing."""

    exit_code = 1


# -- state ----------------------------------------------------------------------

STALLED_ERROR = "max stalled count exceeded"


class JobState(msgspec.Struct, frozen=True, kw_only=True):
    """A job as its own stream folds it (`version` is the stream version)."""

    id: str
    name: str
    data: Any
    options: JobOptions
    status: str
    created_at: int
    depth: int = 0
    version: int = 0
    attempts_made: int = 0
    attempts_started: int = 0
    stalled_counter: int = 0
    lock_token: str | None = None
    lock_until: int | None = None
    lease_ms: int | None = None
    worker_id: str | None = None
    claimed_at: int | None = None
    started_at: int | None = None
    finished_at: int | None = None
    delay_until: int | None = None
    result: Any = None
    error: str | None = None
    progress: Any = None
    tokens: Tokens = Tokens()
    live_children: frozenset[str] = frozenset()
    unread: tuple[str, ...] = ()
    pruned: bool = False
    submitter: Submitter | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def holds(self, token: str | None) -> bool:
        return token is not None and self.lock_token == token and not self.terminal


def _requeued_status(state: JobState) -> str:
    return "waiting-children" if state.status == "waiting-children" else "waiting"


def _unlocked(state: JobState, **changes: Any) -> JobState:
    return msgspec.structs.replace(
        state, lock_token=None, lock_until=None, lease_ms=None, worker_id=None, **changes
    )


def evolve(state: JobState | None, event: Any) -> JobState:
    """Fold one event into the job's state (pure)."""
    if isinstance(event, JobSubmitted):
        return JobState(
            id=event.job_id, name=event.name, data=event.data, options=event.options,
            depth=event.depth, created_at=event.created_at, delay_until=event.delay_until,
            status="delayed" if event.delay_until is not None else "waiting",
            submitter=event.submitter,
        )
    assert state is not None, f"{type(event).__name__} before job.submitted"
    r = msgspec.structs.replace
    if isinstance(event, JobClaimed):
        return r(
            state, status="active", attempts_started=state.attempts_started + 1,
            started_at=state.started_at if state.started_at is not None else event.at,
            claimed_at=event.at, lock_token=event.lock_token, lock_until=event.lock_until,
            lease_ms=event.lease_ms, worker_id=event.worker_id, delay_until=None,
        )
    if isinstance(event, JobLeaseRenewed):
        return r(state, lock_until=event.lock_until)
    if isinstance(event, JobCompleted):
        return _unlocked(
            state, status="completed", result=event.result, finished_at=event.at,
            attempts_made=state.attempts_made + 1,
        )
    if isinstance(event, JobAwaitingChildren):
        return _unlocked(state, status="waiting-children")
    if isinstance(event, JobFailed):
        return _unlocked(
            state, status=event.status, error=event.error,
            attempts_made=state.attempts_made + (1 if event.attempt_consumed else 0),
            delay_until=event.delay_until,
            finished_at=None if event.status == "delayed" else event.at,
        )
    if isinstance(event, JobStalled):
        if event.dead:
            return _unlocked(
                state, status="dead", error=STALLED_ERROR, finished_at=event.at,
                stalled_counter=state.stalled_counter + 1,
                attempts_made=state.attempts_made + 1,
            )
        return _unlocked(
            state, status=_requeued_status(state), stalled_counter=state.stalled_counter + 1
        )
    if isinstance(event, JobTimedOut):
        return _unlocked(
            state, status="dead", error=event.error, finished_at=event.at,
            attempts_made=state.attempts_made + 1,
        )
    if isinstance(event, JobReleased):
        return _unlocked(state, status=_requeued_status(state))
    if isinstance(event, JobPromoted):
        return r(state, status="waiting", delay_until=None)
    if isinstance(event, JobPaused):
        return _unlocked(state, status="paused")
    if isinstance(event, JobResumed):
        return r(state, status="waiting")
    if isinstance(event, JobCancelled):
        return _unlocked(state, status="cancelled", error=event.reason, finished_at=event.at)
    if isinstance(event, JobRetried):
        return _unlocked(
            state, status="waiting", attempts_made=0, error=None, started_at=None,
            stalled_counter=0, finished_at=None, result=None, delay_until=None,
        )
    if isinstance(event, JobPruned):
        return r(state, pruned=True)
    if isinstance(event, JobProgressed):
        return r(state, progress=event.progress)
    if isinstance(event, JobTokensAdded):
        return r(state, tokens=state.tokens + event.tokens)
    if isinstance(event, JobTranscribed):
        return state
    if isinstance(event, JobChildAdded):
        status = state.status
        if status in ("waiting", "delayed", "active"):
            status = "waiting-children"
        return r(state, status=status, live_children=state.live_children | {event.child_id})
    if isinstance(event, JobMessageSent):
        return r(state, unread=(*state.unread, event.message_id))
    if isinstance(event, JobChildDone):
        return r(
            state, live_children=state.live_children - {event.child_id},
            unread=(*state.unread, event.message_id),
        )
    if isinstance(event, JobChildrenSettled):
        return r(state, status="active" if state.lock_token is not None else "waiting")
    if isinstance(event, JobInboxRead):
        read = set(event.message_ids)
        return r(state, unread=tuple(m for m in state.unread if m not in read))
    return state  # an event type this code does not know changes nothing
