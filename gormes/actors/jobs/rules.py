"""Commands to a job and the pure `decide` that turns them into events.

`decide(state, command) -> list[Event]` either returns the events to append (an
empty list when there is nothing to do) or raises a typed rejection
(`InvalidJob`, `InvalidTransition`, `LockLost`). It reads no clock and draws no
random number: `now` (ms since the epoch) and the jitter draw come on the command.
Which statuses a command may act in (claimable, pausable, held by a lease, ...)
is read off the job state machine's table (gormes/events/job_machine.py), the one
both folds of its events read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from gormes.actors.jobs.keys import debounce_until, pending_debounce, validate_keys
from gormes.actors.jobs.state import InvalidJob, InvalidTransition, JobState, LockLost, SendRefused
from gormes.actors.jobs.vocabulary import OPTION_BOUNDS, option_value
from gormes.events.base import Event
from gormes.events.job_machine import CLAIMABLE, HELD, PAUSABLE, PROMOTABLE, RESUMABLE, RETRYABLE
from gormes.events.jobs import (
    MAX_DELAY_MS, MAX_KEY_LENGTH, MAX_NAME_LENGTH,
    Backoff, ChildOutcome, ChildPolicy, JobAwaitingChildren, JobCancelled, JobChildAdded,
    JobCoalesced,
    JobChildDone, JobChildrenSettled, JobClaimed, JobCompleted, JobFailed, JobInboxRead,
    JobLeaseRenewed, JobMessageSent, JobOptions, JobPaused, JobProgressed, JobPromoted,
    JobPruned, JobReleased, JobResumed, JobRetried, JobStalled, JobSubmitted, JobTimedOut,
    JobTokensAdded, JobTranscribed, Submitter, Tokens, TranscriptEntry,
)

FAILING_OUTCOMES = frozenset({"failed", "dead", "timeout"})


class Command(msgspec.Struct, frozen=True, kw_only=True):
    now: int


class Submit(Command, kw_only=True):
    job_id: str
    name: str
    data: Any = None
    options: JobOptions = JobOptions()
    depth: int = 0
    replay_of: str | None = None
    submitter: Submitter | None = None


class Coalesce(Command, kw_only=True):
    """A submission with the job's debounce key joins it (the queue found it pending)."""

    data: Any = None
    submitter: Submitter | None = None


class AddChild(Command, kw_only=True):
    child_id: str


class Claim(Command, kw_only=True):
    worker_id: str
    lock_token: str
    lease_ms: int


class Renew(Command, kw_only=True):
    token: str
    lease_ms: int


class Complete(Command, kw_only=True):
    token: str
    result: Any = None


class Fail(Command, kw_only=True):
    token: str
    error: str
    unrecoverable: bool = False
    jitter_draw: float = 0.5  # uniform in [0, 1): 0.5 means no jitter


class TimeOut(Command, kw_only=True):
    token: str | None  # None: the wall-clock sweep, which holds no token
    error: str = "timeout exceeded"


class CheckStall(Command, kw_only=True):
    grace_ms: int


class Release(Command, kw_only=True):
    token: str
    reason: str = ""


class Promote(Command, kw_only=True):
    pass


class Pause(Command, kw_only=True):
    pass


class Resume(Command, kw_only=True):
    pass


class Cancel(Command, kw_only=True):
    reason: str = "cancelled"


class Retry(Command, kw_only=True):
    pass


class Prune(Command, kw_only=True):
    pass


class Progress(Command, kw_only=True):
    token: str
    progress: Any


class AddTokens(Command, kw_only=True):
    token: str | None  # None only for a child's roll-up (`from_child` set)
    tokens: Tokens
    from_child: str | None = None
    model: str | None = None  # the model the holder's tokens were spent on


class Transcribe(Command, kw_only=True):
    token: str
    entry: TranscriptEntry


class SendMessage(Command, kw_only=True):
    message_id: str
    sender: str
    payload: Any


class ReadInbox(Command, kw_only=True):
    token: str


class NotifyChildDone(Command, kw_only=True):
    message_id: str
    child_id: str
    outcome: ChildOutcome
    result: Any = None
    error: str | None = None
    policy: ChildPolicy = "fail_parent"


class Settle(Command, kw_only=True):
    """The unblock sweep: a parent in waiting-children with no live child."""


# -- helpers ---------------------------------------------------------------------


def parse_options(options: JobOptions | Mapping[str, Any] | None) -> JobOptions:
    """Strictly turn what a submitter gave into options; unknown keys are refused."""
    if options is None:
        return JobOptions()
    if isinstance(options, JobOptions):
        return options
    if not isinstance(options, Mapping):
        raise InvalidJob(f"options must be a mapping, not {type(options).__name__}")
    try:
        return msgspec.convert(dict(options), JobOptions)
    except msgspec.ValidationError as exc:
        raise InvalidJob(f"invalid job options: {exc}") from None


def validate_options(options: JobOptions) -> JobOptions:
    """Refuse values out of range (`vocabulary.OPTION_BOUNDS`); clamp the ones
    whose range clamps (max_stalled to 1..100)."""
    def need(ok: bool, message: str) -> None:
        if not ok:
            raise InvalidJob(f"invalid job options: {message}")

    def short(text: str | None, most: int, name: str) -> None:
        need(text is None or len(text) <= most, f"{name} must be at most {most} characters")

    need(bool(options.queue.strip()), "queue must not be empty")
    short(options.queue, MAX_NAME_LENGTH, "queue")
    short(options.parent_id, MAX_NAME_LENGTH, "parent_id")
    for field, bounds in OPTION_BOUNDS.items():
        if not bounds.clamped:
            name = field.replace(".", " ")
            need(bounds.holds(option_value(options, field)),
                 f"{name} must be between {bounds.low} and {bounds.high}")
    need(
        options.idempotency_key is None or bool(options.idempotency_key.strip()),
        "idempotency_key must not be empty",
    )
    short(options.idempotency_key, MAX_KEY_LENGTH, "idempotency_key")
    options = validate_keys(options, need, short)
    for field, bounds in OPTION_BOUNDS.items():
        if bounds.clamped:  # a top-level field (max_stalled)
            value = option_value(options, field)
            if bounds.clamp(value) != value:
                options = msgspec.structs.replace(options, **{field: bounds.clamp(value)})
    return options


def backoff_ms(backoff: Backoff, attempts_made: int, jitter_draw: float) -> int:
    """Delay before retry `attempts_made` (>= 1): 2^(n-1) x delay or fixed, +-jitter,
    never more than MAX_DELAY_MS (so that `now + delay` always fits the ledger)."""
    base = backoff.delay_ms * (2 ** (attempts_made - 1) if backoff.kind == "exponential" else 1)
    base = min(base, MAX_DELAY_MS)  # before the float product: 2^999 x delay would overflow it
    factor = 1.0 + backoff.jitter * (2.0 * jitter_draw - 1.0)
    return min(max(0, round(base * factor)), MAX_DELAY_MS)


def _require(state: JobState | None) -> JobState:
    if state is None:
        raise InvalidTransition("no such job")
    return state


def _refuse(state: JobState, what: str) -> InvalidTransition:
    return InvalidTransition(f"cannot {what} job {state.id}: it is {state.status}")


def _holder(state: JobState, token: str | None) -> None:
    if not state.holds(token):
        raise LockLost(f"job {state.id}: lock token no longer holds the job ({state.status})")


# -- decide ----------------------------------------------------------------------


def decide(state: JobState | None, cmd: Command) -> list[Event]:  # noqa: C901 - one dispatch
    now = cmd.now
    if isinstance(cmd, Submit):
        if state is not None:
            raise InvalidJob(f"job {cmd.job_id} already exists")
        if not isinstance(cmd.name, str) or not cmd.name.strip():
            raise InvalidJob("job name must not be empty")
        options = validate_options(cmd.options)
        delay_until = now + options.delay_ms if options.delay_ms > 0 else None
        data = cmd.data
        if options.debounce_key is not None:
            delay_until = debounce_until(options, now, now)
            if options.debounce_mode == "merge":
                data = [data]  # the list the submissions coalesced into it are appended to
        return [JobSubmitted(
            job_id=cmd.job_id, name=cmd.name, data=data, options=options,
            depth=cmd.depth, created_at=now, delay_until=delay_until, replay_of=cmd.replay_of,
            submitter=cmd.submitter,
        )]

    state = _require(state)

    if isinstance(cmd, Coalesce):
        if not pending_debounce(state, now):
            raise _refuse(state, "coalesce a submission into")
        return [JobCoalesced(
            data=cmd.data, mode=state.options.debounce_mode,
            delay_until=debounce_until(state.options, state.created_at, now),
            submitter=cmd.submitter, at=now,
        )]

    if isinstance(cmd, AddChild):
        if state.terminal:
            raise InvalidJob(f"parent job {state.id} is {state.status}")
        cap = state.options.max_children
        if cap is not None and len(state.live_children) >= cap:
            raise InvalidJob(f"parent job {state.id} already has {cap} live children (max_children)")
        return [JobChildAdded(child_id=cmd.child_id, at=now)]

    if isinstance(cmd, Claim):
        if state.status not in CLAIMABLE:
            raise _refuse(state, "claim")
        return [JobClaimed(
            worker_id=cmd.worker_id, lock_token=cmd.lock_token, lease_ms=cmd.lease_ms,
            lock_until=now + cmd.lease_ms, at=now,
        )]

    if isinstance(cmd, Renew):
        _holder(state, cmd.token)
        return [JobLeaseRenewed(lock_token=cmd.token, lock_until=now + cmd.lease_ms, at=now)]

    if isinstance(cmd, Complete):
        _holder(state, cmd.token)
        if state.live_children:
            return [JobAwaitingChildren(at=now)]
        return [JobCompleted(result=cmd.result, at=now)]

    if isinstance(cmd, Fail):
        _holder(state, cmd.token)
        attempts = state.attempts_made + 1
        if cmd.unrecoverable or attempts >= state.options.max_attempts:
            return [JobFailed(
                error=cmd.error, status="dead", unrecoverable=cmd.unrecoverable, at=now
            )]
        delay = backoff_ms(state.options.backoff, attempts, cmd.jitter_draw)
        return [JobFailed(
            error=cmd.error, status="delayed", delay_until=now + delay, backoff_ms=delay, at=now
        )]

    if isinstance(cmd, TimeOut):
        if cmd.token is not None:
            _holder(state, cmd.token)
        elif state.status != "active":
            raise _refuse(state, "time out")
        return [JobTimedOut(error=cmd.error, at=now)]

    if isinstance(cmd, CheckStall):
        locked = state.lock_until is not None and state.status in HELD
        if not locked or now <= state.lock_until + cmd.grace_ms:  # type: ignore[operator]
            return []
        if state.status == "waiting-children":
            return [JobReleased(reason="lease expired while waiting for children", at=now)]
        return [JobStalled(dead=state.stalled_counter + 1 >= state.options.max_stalled, at=now)]

    if isinstance(cmd, Release):
        _holder(state, cmd.token)
        return [JobReleased(reason=cmd.reason, at=now)]

    if isinstance(cmd, Promote):
        if state.status not in PROMOTABLE or (state.delay_until or 0) > now:
            return []
        return [JobPromoted(at=now)]

    if isinstance(cmd, Pause):
        if state.status not in PAUSABLE:
            raise _refuse(state, "pause")
        return [JobPaused(at=now)]

    if isinstance(cmd, Resume):
        if state.status not in RESUMABLE:
            raise _refuse(state, "resume")
        return [JobResumed(at=now)]

    if isinstance(cmd, Cancel):
        if state.terminal:
            raise _refuse(state, "cancel")
        return [JobCancelled(reason=cmd.reason, at=now)]

    if isinstance(cmd, Retry):
        if state.status not in RETRYABLE:
            raise _refuse(state, "retry")
        return [JobRetried(at=now)]

    if isinstance(cmd, Prune):
        if not state.terminal or state.pruned:
            return []
        return [JobPruned(at=now)]

    if isinstance(cmd, Progress):
        _holder(state, cmd.token)
        return [JobProgressed(progress=cmd.progress, at=now)]

    if isinstance(cmd, AddTokens):
        t = cmd.tokens
        if min(t.input, t.output, t.cache_read, t.cache_write, t.reasoning) < 0:
            raise InvalidJob("token deltas must not be negative")
        if cmd.from_child is None:
            _holder(state, cmd.token)
        elif state.terminal:
            return []
        return [JobTokensAdded(tokens=t, from_child=cmd.from_child, model=cmd.model, at=now)]

    if isinstance(cmd, Transcribe):
        _holder(state, cmd.token)
        return [JobTranscribed(entry=cmd.entry, at=now)]

    if isinstance(cmd, SendMessage):
        if cmd.sender != "operator" and cmd.sender != state.options.parent_id:
            raise SendRefused(
                f"only job {state.id}'s parent or an operator may send to it, not {cmd.sender!r}"
            )
        if state.terminal:
            raise _refuse(state, "send to")
        return [JobMessageSent(
            message_id=cmd.message_id, sender=cmd.sender, payload=cmd.payload, at=now
        )]

    if isinstance(cmd, ReadInbox):
        if not state.holds(cmd.token) or not state.unread:
            return []
        return [JobInboxRead(message_ids=state.unread, at=now)]

    if isinstance(cmd, NotifyChildDone):
        if state.terminal:
            return []
        events: list[Event] = [JobChildDone(
            message_id=cmd.message_id, child_id=cmd.child_id, outcome=cmd.outcome,
            result=cmd.result, error=cmd.error, policy=cmd.policy, at=now,
        )]
        failing = cmd.outcome in FAILING_OUTCOMES
        live = state.live_children - {cmd.child_id}
        if failing and cmd.policy == "fail_parent":
            events.append(JobFailed(
                error=f"child job {cmd.child_id} failed: {cmd.error or cmd.outcome}",
                status="failed", attempt_consumed=False, at=now,
            ))
        elif state.status == "waiting-children" and (
            not live or (failing and cmd.policy == "continue")
        ):
            events.append(JobChildrenSettled(at=now))
        return events

    if isinstance(cmd, Settle):
        if state.status != "waiting-children" or state.live_children:
            return []
        return [JobChildrenSettled(at=now)]

    raise TypeError(f"unknown job command {type(cmd).__name__}")


def outcome_of(state: JobState) -> ChildOutcome | None:
    """How a terminal job ended, as its parent's child_done reports it."""
    if state.status == "completed":
        return "complete"
    if state.status == "dead" and state.error in ("timeout exceeded", "handler ignored abort"):
        return "timeout"
    if state.status in ("failed", "dead", "cancelled"):
        return state.status  # type: ignore[return-value]
    return None
