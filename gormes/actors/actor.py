"""The pure half of an actor: a behavior's `initial`, `evolve` and `decide`.

An actor owns one stream, `f"{kind}-{id}"`. Its state is the fold of that
stream's events through `evolve`, counted with the stream's version; a command
goes through `decide`, which returns the events to append (possibly none) or
raises a `CommandRejected`. Nothing here does I/O, reads a clock or draws a
random number: a command carries any time or randomness it needs. So everything
in this module is unit-tested without trio, and replaying a stream is free.

    class Counter(Behavior[int, Add]):
        kind = "counter"
        def initial(self) -> int: return 0
        def evolve(self, state: int, event: Event | UnknownEvent) -> int: ...
        def decide(self, state: int, command: Add) -> Sequence[Event]: ...

    events, state = step(Counter(), State.empty(Counter()), Add(n=2))
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from gormes.errors import GormesError, UserError
from gormes.events.base import Event, UnknownEvent

S = TypeVar("S")  # the actor's state value
C = TypeVar("C")  # the commands it decides on


class CommandRejected(UserError):
    """`decide` refused a command; nothing was appended and the actor lives on.

    Subclass it for typed rejections (`class InsufficientFunds(CommandRejected)`).
    """


@dataclass(frozen=True, slots=True)
class Address:
    """Who an actor is: its kind and id. Its stream is `f"{kind}-{id}"`."""

    kind: str
    id: str

    @property
    def stream(self) -> str:
        return f"{self.kind}-{self.id}"


class ExitReason(enum.Enum):
    STOPPED = "stopped"  # asked to stop (`ActorRef.stop()`)
    CANCELLED = "cancelled"  # its parent or the runtime stopped, taking it along
    FAILED = "failed"  # an exception escaped decide, evolve or the store
    TIMED_OUT = "timed_out"  # its deadline passed


@dataclass(frozen=True, slots=True)
class ActorExit:
    """Why an actor ended; what a parent receives about a child (in its mailbox)."""

    address: Address
    reason: ExitReason
    error: BaseException | None = None

    @property
    def abnormal(self) -> bool:
        return self.reason in (ExitReason.FAILED, ExitReason.TIMED_OUT)


class ChildFailed(GormesError):
    """A child failed or timed out and its parent did not handle it: the parent fails too."""

    def __init__(self, exit: ActorExit) -> None:
        detail = f": {exit.error!r}" if exit.error is not None else ""
        super().__init__(f"child {exit.address.stream} {exit.reason.value}{detail}")
        self.exit = exit


@dataclass(frozen=True, slots=True)
class State(Generic[S]):
    """An actor's state value and the stream version it reflects (0: no events yet)."""

    version: int
    value: S

    @classmethod
    def empty(cls, behavior: Behavior[S, C]) -> State[S]:
        return cls(0, behavior.initial())


class Behavior(ABC, Generic[S, C]):
    """What an actor is. Subclasses set `kind` and implement the three pure methods.

    `evolve` sees every event of the stream, including ones others wrote there
    (notes, `UnknownEvent`s from a newer gormes): it returns the state unchanged
    for an event it does not care about.
    """

    kind: ClassVar[str]

    @abstractmethod
    def initial(self) -> S: ...

    @abstractmethod
    def evolve(self, state: S, event: Event | UnknownEvent) -> S: ...

    @abstractmethod
    def decide(self, state: S, command: C) -> Sequence[Event]:
        """The events a command produces; raise `CommandRejected` to refuse it."""

    def on_child_exit(self, state: S, exit: ActorExit) -> Sequence[Event]:
        """What this actor records when a child it spawned ends.

        By default a child that stopped or was cancelled is unremarkable, and one
        that failed or timed out fails this actor too (reported to its own parent),
        so no failure goes unnoticed. Override to record the loss and carry on.
        """
        if exit.abnormal:
            raise ChildFailed(exit)
        return ()

    def address(self, actor_id: str) -> Address:
        return Address(self.kind, actor_id)


def fold(
    behavior: Behavior[S, C],
    events: Iterable[Event | UnknownEvent],
    state: State[S] | None = None,
) -> State[S]:
    """Evolve `state` (the empty state by default) by consecutive events of its stream."""
    current = State.empty(behavior) if state is None else state
    value, version = current.value, current.version
    for event in events:
        value = behavior.evolve(value, event)
        version += 1
    return State(version, value)


def step(
    behavior: Behavior[S, C], state: State[S], command: C
) -> tuple[tuple[Event, ...], State[S]]:
    """Decide on a command and evolve by its events: what the runtime does, minus I/O."""
    events = tuple(behavior.decide(state.value, command))
    return events, fold(behavior, events, state)


@dataclass(frozen=True, slots=True)
class Decision(Generic[S]):
    """What `ask` returns: the events a command appended and the state after them."""

    events: tuple[Event, ...]
    state: State[S]
    position: int | None  # global position of the last event appended; None if none
    attempts: int  # 1, plus one per version conflict retried


class ActorStopped(GormesError):
    """The actor is not running, or ended before answering.

    A command that was being appended when the actor ended may or may not have
    been written: read the stream (`ActorRuntime.get`) to know.
    """

    def __init__(self, address: Address, exit: ActorExit | None = None) -> None:
        reason = f" ({exit.reason.value})" if exit is not None else ""
        super().__init__(f"actor {address.stream} is not running{reason}")
        self.address = address
        self.exit = exit


class ActorFailed(ActorStopped):
    """The command asked for made the actor fail; the original error is the `__cause__`."""


class ActorAlreadyRunning(GormesError):
    """`spawn` was asked for an actor that is already in memory (use `get`)."""


class RuntimeClosed(GormesError):
    """The actor runtime was closed while a caller still used it."""
