"""The one actor model: a stream, an initial state, `evolve`, `decide`, and `fold`.

An actor owns one stream, `f"{kind}-{id}"`. Its state is the fold of that
stream's events through `evolve`, counted with the stream's version; a command
goes through `decide`, which returns the events to append (possibly none) or
raises the kind's own typed rejection (a `UserError`). Nothing here does I/O,
reads a clock or draws a random number: a command carries any time or
randomness it needs (`now`, a jitter draw). So everything here is unit-tested
without trio or a store, and replaying a stream is free.

A kind of actor is a `Behavior` value made of its pure functions:

    COUNTER = Behavior(kind="counter", initial=0, evolve=count, decide=add)
    events, state = step(COUNTER, State.empty(COUNTER), Add(n=2))

The job (`actors/jobs/actor.py`), cron (`actors/cron/actor.py`) and run
(`actors/runs/actor.py`) actors are such values, and every place that rebuilds
one of them from its stream calls `fold`. Where a command is carried out (read,
fold, decide, append in one store transaction) is `actors/runtime.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

from gormes.events.base import Event, UnknownEvent

S = TypeVar("S")  # the actor's state value
C = TypeVar("C")  # the commands it decides on


def _as_is(value: S, version: int) -> S:
    return value


def struct_version(value: Any, version: int) -> Any:
    """`with_version` for a state that is None (no such actor yet) or a msgspec
    Struct with a `version` field (the job's, the schedule's)."""
    return value if value is None else msgspec.structs.replace(value, version=version)


@dataclass(frozen=True, slots=True)
class Behavior(Generic[S, C]):
    """A kind of actor: its stream's prefix and its pure functions.

    `evolve` sees every event of the stream, including ones others wrote there
    (notes, `UnknownEvent`s from a newer gormes): it returns the state unchanged
    for an event it does not care about. `decide` returns the events a command
    produces, or raises to refuse it. `with_version` is for a state value that
    carries its own stream version (compared with the stream later, in another
    transaction): `fold` writes the version into it once it has folded.
    """

    kind: str
    initial: S
    evolve: Callable[[S, Event | UnknownEvent], S]
    decide: Callable[[S, C], Sequence[Event]]
    with_version: Callable[[S, int], S] = _as_is

    def stream(self, actor_id: str) -> str:
        return f"{self.kind}-{actor_id}"


@dataclass(frozen=True, slots=True)
class State(Generic[S]):
    """An actor's state value and the stream version it reflects (0: no events yet)."""

    version: int
    value: S

    @classmethod
    def empty(cls, behavior: Behavior[S, Any]) -> State[S]:
        return cls(0, behavior.initial)


def fold(
    behavior: Behavior[S, Any],
    events: Iterable[Event | UnknownEvent],
    state: State[S] | None = None,
) -> State[S]:
    """Evolve `state` (the empty state by default) by consecutive events of its stream."""
    start = 0 if state is None else state.version
    value = behavior.initial if state is None else state.value
    version = start
    evolve = behavior.evolve
    for event in events:
        value = evolve(value, event)
        version += 1
    if version != start:
        value = behavior.with_version(value, version)
    return State(version, value)


def step(
    behavior: Behavior[S, C], state: State[S], command: C
) -> tuple[tuple[Event, ...], State[S]]:
    """Decide on a command and evolve by its events: what the runtime does, minus I/O."""
    events = tuple(behavior.decide(state.value, command))
    return events, fold(behavior, events, state)
