"""The job actor's pure state and `evolve`, and the job queue's errors.

`evolve` reads the job state machine's table (gormes/events/job_machine.py), the
one the ledger's UPDATEs are compiled from: the status each event leads to and
the fields it sets. The rest (live children, the unread inbox) is code below.

No I/O, no clock, no randomness: the time (`now`, ms since the epoch) and any
random draw (backoff jitter) arrive on the command. `decide` lives in
gormes/actors/jobs/rules.py; the public API is gormes/actors/jobs/queue.py.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gormes.errors import GormesError, UserError
from gormes.events.job_machine import ALWAYS, TERMINAL, transition_of
from gormes.events.jobs import (
    JobChildAdded, JobChildDone, JobInboxRead, JobMessageSent, JobOptions, JobSubmitted,
    Submitter, Tokens,
)


class JobError(GormesError):
    """Base of the job queue's errors."""


class InvalidJob(UserError, JobError):
    """A submit (or replay) that cannot be accepted: bad name, options or data."""


class SendRefused(InvalidJob):
    """A message from a sender the job does not take (only its parent or an operator):
    the operations' layer answers it as a refusal (`OperationDenied`)."""


class JobNotFound(UserError, JobError):
    """No job with that id."""


class InvalidTransition(UserError, JobError):
    """The job is not in a state that allows the command (pause a completed job...)."""


class LockLost(JobError):
    """The lock token no longer holds the job: a stale holder changes nothing."""

    exit_code = 1


# -- state ----------------------------------------------------------------------

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
    submissions: int = 1  # itself and the submissions coalesced into it (debounce)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def holds(self, token: str | None) -> bool:
        return token is not None and self.lock_token == token and not self.terminal


def _live_children(state: JobState, event: Any) -> dict[str, Any]:
    if isinstance(event, JobChildAdded):
        return {"live_children": state.live_children | {event.child_id}}
    return {"live_children": state.live_children - {event.child_id}}


def _unread(state: JobState, event: Any) -> dict[str, Any]:
    if isinstance(event, JobInboxRead):
        read = set(event.message_ids)
        return {"unread": tuple(m for m in state.unread if m not in read)}
    return {"unread": (*state.unread, event.message_id)}


def _child_done(state: JobState, event: JobChildDone) -> dict[str, Any]:
    return {**_live_children(state, event), **_unread(state, event)}


# What the machine's table does not say about a JobState: the set of live children
# (the ledger keeps their count) and the unread inbox (the ledger's inbox table).
_BEYOND_THE_TABLE = {
    JobChildAdded: _live_children, JobChildDone: _child_done,
    JobMessageSent: _unread, JobInboxRead: _unread,
}


def evolve(state: JobState | None, event: Any) -> JobState:
    """Fold one event into the job's state (pure): the status and fields that
    gormes/events/job_machine.py's table says, then what it leaves to code."""
    transition = transition_of(event)
    if isinstance(event, JobSubmitted):
        assert transition is not None
        return JobState(
            id=event.job_id, name=event.name, data=event.data, options=event.options,
            depth=event.depth, created_at=event.created_at, delay_until=event.delay_until,
            status=transition.to, submitter=event.submitter,  # type: ignore[arg-type]
        )
    assert state is not None, f"{type(event).__name__} before job.submitted"
    if transition is None:
        return state  # an event this code does not know changes nothing
    changes = transition.changes(state, event)
    if transition.removes == ALWAYS:
        changes["pruned"] = True  # the ledger drops the row; the state says so
    beyond = _BEYOND_THE_TABLE.get(type(event))
    if beyond is not None:
        changes.update(beyond(state, event))
    return msgspec.structs.replace(state, **changes) if changes else state
