"""The job state machine, written once: what each job event does to a job.

For every job event type the table `TRANSITIONS` says which statuses it may
follow, which status it leads to, which fields it sets and how, whether it stamps
the ledger row's `updated_at`, and whether it removes the job from the ledger.
Both folds of a job's events read it:

- `evolve` (gormes/actors/jobs/state.py) folds the table into a `JobState`;
- the ledger (gormes/projections/ledger.py) compiles it into the one UPDATE each
  event makes to its `jobs` row (gormes/projections/ledger_sql.py).

So a new event type, a new status or a new effect is written here once, and
neither fold can forget it: an event type of `JobEvent` missing from the table,
or a status of `Status` that no transition reaches, fails at import. What the
table does not say is code on both sides, and kept small: a submitted job's first
row, the live-children set (a count in the ledger), the inbox, the transcript.
tests/actors/test_job_machine.py folds random legal histories both ways, on
SQLite and PostgreSQL, and compares every field the ledger shows.

The meaning of each status (terminal, live, claimable, ...) is read off the same
table: a status is claimable because `job.claimed` may follow it.

Pure data and pure functions over any object with a job's fields (`status`,
`lock_token`, the fields the effects name); no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, get_args

from gormes.events.jobs import (
    STATUSES, TERMINAL, JobAwaitingChildren, JobCancelled, JobChildAdded, JobChildDone,
    JobChildrenSettled, JobClaimed, JobCoalesced, JobCompleted, JobEvent, JobFailed, JobInboxRead,
    JobLeaseRenewed, JobMessageSent, JobPaused, JobProgressed, JobPromoted, JobPruned,
    JobReleased, JobResumed, JobRetried, JobStalled, JobSubmitted, JobTimedOut,
    JobTokensAdded, JobTranscribed,
)

STALLED_ERROR = "max stalled count reached"
# What ledgers built before version 3 wrote instead (the count is reached, not
# exceeded: --max-stalled 1 ends a job at its first stall); they are reworded.
STALLED_ERROR_BEFORE = "max stalled count exceeded"

# -- where a transition leads ------------------------------------------------------


class StatusIn(NamedTuple):
    """True when the job's status is one of `statuses`."""

    statuses: frozenset[str]

    def holds(self, job: Any) -> bool:
        return job.status in self.statuses


class Locked(NamedTuple):
    """True when a lock token holds the job."""

    def holds(self, job: Any) -> bool:
        return job.lock_token is not None


class Case(NamedTuple):
    """`then` when `when` holds of the job before the event, else `otherwise`
    (None in either: the status stays)."""

    when: StatusIn | Locked
    then: str | None
    otherwise: str | None


Target = str | Case | None  # a status, a choice between two, or None: the status stays


# -- what a transition sets --------------------------------------------------------


class Take(NamedTuple):
    """field := the event's `attr`."""

    field: str
    attr: str

    def value(self, job: Any, event: Any) -> Any:
        return getattr(event, self.attr)


class Put(NamedTuple):
    """field := `constant`."""

    field: str
    constant: Any

    def value(self, job: Any, event: Any) -> Any:
        return self.constant


class Count(NamedTuple):
    """field := field + `by` (a number, or the event's attribute of that name)."""

    field: str
    by: int | str = 1

    def value(self, job: Any, event: Any) -> Any:
        by = getattr(event, self.by) if isinstance(self.by, str) else self.by
        return getattr(job, self.field) + by


class First(NamedTuple):
    """field := field when it is set, else the event's `attr` (set once)."""

    field: str
    attr: str

    def value(self, job: Any, event: Any) -> Any:
        current = getattr(job, self.field)
        return current if current is not None else getattr(event, self.attr)


class Append(NamedTuple):
    """field := field + [the event's `attr`] (the field holds a list)."""

    field: str
    attr: str

    def value(self, job: Any, event: Any) -> Any:
        return [*getattr(job, self.field), getattr(event, self.attr)]


Effect = Take | Put | Count | First | Append

ALWAYS = "always"  # `removes`: the event itself removes the job from the ledger


@dataclass(frozen=True, eq=False)  # eq=False: hashed and compared by identity, cheaply
class Transition:
    """What one kind of job event does to a job."""

    event: type
    follows: frozenset[str] | None  # the statuses it may follow (None: none, a new job)
    to: Target
    sets: tuple[Effect, ...] = ()
    stamps: bool = True  # the ledger's `updated_at` := the event's `at`
    # ALWAYS, or the option (`remove_on_complete`...) whose job leaves the ledger
    # here: the ledger deletes its rows, the job's own stream keeps everything.
    removes: str | None = None
    # (attribute, value): this transition is the event's when its attribute has
    # that value (an event type with several transitions; the last may have none).
    when: tuple[str, Any] | None = None

    def __post_init__(self) -> None:
        # `changes` runs in every fold: the constants are set with one dict copy,
        # the rest by kind, without a call per effect.
        def of(kind: type) -> tuple[Any, ...]:
            return tuple(e for e in self.sets if isinstance(e, kind))

        object.__setattr__(self, "_puts", {e.field: e.constant for e in of(Put)})
        object.__setattr__(self, "_takes", tuple((e.field, e.attr) for e in of(Take)))
        object.__setattr__(self, "_rest", of(Count) + of(First) + of(Append))

    @property
    def name(self) -> str:
        tag = self.event.__struct_config__.tag
        return tag if self.when is None else f"{tag} ({self.when[0]}={self.when[1]!r})"

    def status_after(self, job: Any) -> str:
        """The job's status after this transition (`job`: before it)."""
        to = self.to
        if to is None:
            return job.status
        if isinstance(to, str):
            return to
        chosen = to.then if to.when.holds(job) else to.otherwise
        return job.status if chosen is None else chosen

    def changes(self, job: Any, event: Any) -> dict[str, Any]:
        """The fields this transition sets on `job` (status included), as values."""
        out: dict[str, Any] = dict(self._puts)  # type: ignore[attr-defined]
        for field, attr in self._takes:  # type: ignore[attr-defined]
            out[field] = getattr(event, attr)
        for effect in self._rest:  # type: ignore[attr-defined]
            out[effect.field] = effect.value(job, event)
        if self.to is not None:
            out["status"] = self.status_after(job)
        return out


# -- the statuses, by what may happen in them ----------------------------------------
# (`STATUSES` and `TERMINAL` are the vocabulary of gormes/events/jobs.py, re-exported.)

LIVE: frozenset[str] = frozenset(STATUSES) - TERMINAL
HELD: frozenset[str] = frozenset({"active", "waiting-children"})  # where a lease can hold it

UNLOCK = (
    Put("lock_token", None), Put("lock_until", None), Put("lease_ms", None),
    Put("worker_id", None),
)
REQUEUE = Case(StatusIn(frozenset({"waiting-children"})), None, "waiting")
_DIE = (Take("finished_at", "at"), Count("attempts_made"), *UNLOCK)

TRANSITIONS: tuple[Transition, ...] = (
    # `follows` None: the event that starts a job's stream (the ledger inserts its row).
    Transition(JobSubmitted, None, "waiting", when=("delay_until", None)),
    Transition(JobSubmitted, None, "delayed"),
    Transition(JobClaimed, frozenset({"waiting"}), "active", (
        Count("attempts_started"), First("started_at", "at"), Take("claimed_at", "at"),
        Take("lock_token", "lock_token"), Take("lock_until", "lock_until"),
        Take("lease_ms", "lease_ms"), Take("worker_id", "worker_id"), Put("delay_until", None),
    )),
    Transition(JobLeaseRenewed, HELD, None, (Take("lock_until", "lock_until"),), stamps=False),
    Transition(
        JobCompleted, HELD, "completed", (Take("result", "result"), *_DIE),
        removes="remove_on_complete",
    ),
    Transition(JobAwaitingChildren, HELD, "waiting-children", UNLOCK),
    # A holder's failed attempt (HELD), or a child's failure under fail_parent (LIVE).
    Transition(JobFailed, LIVE, "delayed", (
        Take("error", "error"), Count("attempts_made", "attempt_consumed"),
        Take("delay_until", "delay_until"), Put("finished_at", None), *UNLOCK,
    ), when=("status", "delayed")),
    *(
        Transition(JobFailed, LIVE, status, (
            Take("error", "error"), Count("attempts_made", "attempt_consumed"),
            Take("delay_until", "delay_until"), Take("finished_at", "at"), *UNLOCK,
        ), removes="remove_on_fail", when=("status", status))
        for status in ("dead", "failed")
    ),
    Transition(JobStalled, frozenset({"active"}), "dead", (
        Put("error", STALLED_ERROR), Count("stalled_counter"), *_DIE,
    ), removes="remove_on_fail", when=("dead", True)),
    Transition(
        JobStalled, frozenset({"active"}), REQUEUE, (Count("stalled_counter"), *UNLOCK),
        when=("dead", False),
    ),
    Transition(
        JobTimedOut, HELD, "dead", (Take("error", "error"), *_DIE), removes="remove_on_fail",
    ),
    Transition(JobReleased, HELD, REQUEUE, UNLOCK),
    Transition(JobPromoted, frozenset({"delayed"}), "waiting", (Put("delay_until", None),)),
    # A debounced job still in its window takes a submission (decision 0032).
    *(
        Transition(JobCoalesced, frozenset({"delayed"}), None, (
            data, Take("delay_until", "delay_until"), Count("submissions"),
        ), when=when)
        for data, when in (
            (Take("data", "data"), ("mode", "last")), (Append("data", "data"), None),
        )
    ),
    Transition(JobPaused, frozenset({"waiting", "delayed", "active"}), "paused", UNLOCK),
    Transition(JobResumed, frozenset({"paused"}), "waiting"),
    Transition(JobCancelled, LIVE, "cancelled", (
        Take("error", "reason"), Take("finished_at", "at"), *UNLOCK,
    )),
    Transition(JobRetried, frozenset({"failed", "dead"}), "waiting", (
        Put("attempts_made", 0), Put("error", None), Put("started_at", None),
        Put("stalled_counter", 0), Put("finished_at", None), Put("result", None),
        Put("delay_until", None), *UNLOCK,
    )),
    Transition(JobPruned, TERMINAL, None, stamps=False, removes=ALWAYS),
    Transition(JobProgressed, HELD, None, (Take("progress", "progress"),)),
    # A holder's tokens (HELD), or a completed child's rolled up (LIVE).
    Transition(JobTokensAdded, LIVE, None, (Count("tokens", "tokens"),), stamps=False),
    Transition(JobTranscribed, HELD, None, stamps=False),
    Transition(JobChildAdded, LIVE, Case(
        StatusIn(frozenset({"waiting", "delayed", "active"})), "waiting-children", None,
    )),
    Transition(JobMessageSent, LIVE, None, stamps=False),
    Transition(JobChildDone, LIVE, None),
    Transition(
        JobChildrenSettled, frozenset({"waiting-children"}), Case(Locked(), "active", "waiting"),
    ),
    Transition(JobInboxRead, HELD, None, stamps=False),
)

_BY_TYPE: dict[type, tuple[Transition, ...]] = {}
for _t in TRANSITIONS:
    _BY_TYPE[_t.event] = (*_BY_TYPE.get(_t.event, ()), _t)


def transitions_of(event_type: type) -> tuple[Transition, ...]:
    """The transitions of one event type (empty: not a job event)."""
    return _BY_TYPE.get(event_type, ())


def transition_of(event: Any) -> Transition | None:
    """The transition `event` makes (None: not a job event, or a shape no
    transition takes, which both folds then leave without effect)."""
    found = _BY_TYPE.get(type(event))
    if found is None:
        return None
    for t in found:
        if t.when is None or getattr(event, t.when[0]) == t.when[1]:
            return t
    return None


def _follows(event_type: type) -> frozenset[str]:
    return frozenset().union(*(t.follows or () for t in _BY_TYPE[event_type]))


CLAIMABLE = _follows(JobClaimed)
PROMOTABLE = _follows(JobPromoted)
PAUSABLE = _follows(JobPaused)
RESUMABLE = _follows(JobResumed)
RETRYABLE = _follows(JobRetried)


def _statuses_named(t: Transition) -> set[str]:
    named = set(t.follows or ())
    if isinstance(t.to, str):
        named.add(t.to)
    elif isinstance(t.to, Case):
        named.update(s for s in (t.to.then, t.to.otherwise) if s is not None)
        if isinstance(t.to.when, StatusIn):
            named.update(t.to.when.statuses)
    return named


def _reached(t: Transition) -> set[str]:
    if isinstance(t.to, Case):
        return {s for s in (t.to.then, t.to.otherwise) if s is not None}
    return {t.to} if isinstance(t.to, str) else set()


def _check() -> None:
    """The table covers every job event type and every status, and names no other."""
    missing = set(get_args(JobEvent)) - set(_BY_TYPE)
    if missing:
        raise TypeError(f"job events without a transition: {sorted(c.__name__ for c in missing)}")
    for t in TRANSITIONS:
        unknown = _statuses_named(t) - set(STATUSES)
        if unknown:
            raise TypeError(f"{t.name} names statuses that are not job statuses: {sorted(unknown)}")
    for t in TRANSITIONS:
        fields = [e.field for e in t.sets]
        if len(fields) != len(set(fields)):
            raise TypeError(f"{t.name} sets a field twice: {fields}")
    for ts in _BY_TYPE.values():
        if any(t.when is None for t in ts[:-1]):
            raise TypeError(f"{ts[0].name}: only the last transition of an event may have no `when`")
    unreached = set(STATUSES) - set().union(*map(_reached, TRANSITIONS))
    if unreached:
        raise TypeError(f"job statuses no transition leads to: {sorted(unreached)}")


_check()
