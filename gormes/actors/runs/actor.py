"""The run actor: stream `run-<id>`, state `RunLife` (None before `run.started`).

A run's own handler writes most of its stream: each observation its context
makes is recorded as it happens (gormes/actors/runs/live.py), with no decision
to take, and the run manager records its end. What others ask of a run is
decided here, on the stream as it is, in one store transaction
(gormes/actors/runtime.py): a message for its inbox (refused once the run has
ended) and the end of a run whose process was lost (`CutOff`, which changes
nothing for a run that has an end already). A message may be refused, too, when
the messages its run has not read yet would pass the sender's cap
(`max_unread_bytes`: a gateway's, decision 0074).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from gormes.actors.actor import Behavior
from gormes.errors import UserError
from gormes.events.base import Event, UnknownEvent
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    NO_TOKENS,
    RUN_TERMINAL,
    RunCancelled,
    RunChildSpawned,
    RunInboxRead,
    RunMessageSent,
    RunStarted,
    tokens_of,
)

# The end's tag, not its class: an end written by a newer gormes (decoded as an
# UnknownEvent) is an end all the same.
_END_TAGS = frozenset(f"run.{status}" for status in RUN_TERMINAL)


class RunNotFound(UserError):
    """No run with that id (or it has already ended, for a message)."""


class InboxFull(UserError):
    """A message its sender's cap on a run's unread messages refuses."""


class RunLife(msgspec.Struct, frozen=True, kw_only=True):
    """A run as its stream folds it."""

    started: RunStarted
    ended: bool = False
    tokens: Tokens = Tokens()  # what its events add up to: its own usage and its children's totals
    # The messages sent to it and not read yet: (message id, bytes of its payload's JSON).
    unread: tuple[tuple[str, int], ...] = ()
    children: tuple[str, ...] = ()  # the runs it spawned, in order


class SendMessage(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    message_id: str
    sender: str
    payload: Any = None
    sent_at: int  # ms since the epoch
    # Refused (InboxFull) when the run's unread messages with this one would hold
    # more bytes of JSON than this; None: no cap (the operator, the system).
    max_unread_bytes: int | None = None


class CutOff(msgspec.Struct, frozen=True, kw_only=True):
    """End a run that has no end, because the process driving it was lost."""

    reason: str


Command = SendMessage | CutOff


def evolve(state: RunLife | None, event: Event | UnknownEvent) -> RunLife | None:
    if state is None:
        return RunLife(started=event) if isinstance(event, RunStarted) else None
    if event.type in _END_TAGS:
        return msgspec.structs.replace(state, ended=True)
    if isinstance(event, RunChildSpawned):
        return msgspec.structs.replace(state, children=(*state.children, event.child_run_id))
    if isinstance(event, RunMessageSent):
        size = len(msgspec.json.encode(event.payload))
        return msgspec.structs.replace(state, unread=(*state.unread, (event.message_id, size)))
    if isinstance(event, RunInboxRead) and state.unread:
        read = {message.id for message in event.messages}
        return msgspec.structs.replace(state, unread=tuple(u for u in state.unread if u[0] not in read))
    added = tokens_of(event)  # type: ignore[arg-type]
    if added != NO_TOKENS:
        return msgspec.structs.replace(state, tokens=state.tokens + added)
    return state


def decide(state: RunLife | None, command: Command) -> Sequence[Event]:
    if isinstance(command, SendMessage):
        if state is None:
            raise RunNotFound(f"no run with id {command.run_id!r}")
        if state.ended:
            raise RunNotFound(f"run {command.run_id} has ended: it reads no more messages")
        cap = command.max_unread_bytes
        if cap is not None:
            waiting = sum(size for _, size in state.unread) + len(msgspec.json.encode(command.payload))
            if waiting > cap:
                raise InboxFull(
                    f"run {command.run_id} has not read its messages: with this one they would be {waiting}"
                    f" bytes of JSON, past the sender's cap of {cap}; send again once it has read them"
                )
        return [RunMessageSent(
            message_id=command.message_id, sender=command.sender, payload=command.payload,
            sent_at=command.sent_at,
        )]
    if state is None or state.ended:
        return []
    return [RunCancelled(reason=command.reason, tokens=state.tokens)]


RUN: Behavior[RunLife | None, Command] = Behavior(
    kind="run", initial=None, evolve=evolve, decide=decide,
)
