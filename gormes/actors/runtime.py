"""The actor runtime: where a command meets its actor, inside one store transaction.

An actor is not a task or a mailbox here: it is its stream. To carry out a
command, the runtime reads the actor's stream inside a store transaction, folds
it (`fold`), lets the pure `decide` produce events, appends them at the version
it read and evolves the state by them. The transaction holds the database write
lock, so nothing can land between the read and the append: a second caller, in
this process or another, decides on a stream that already holds the first
caller's events. Whatever `decide` raises (the kind's typed rejection) leaves
the transaction, and so nothing of it is written.

    events, state = await ask(store, CRON, "nightly", Pause("nightly", at=now_ms))

Several commands, on several actors, may share one transaction: `execute` runs
inside a `store.transact` function and takes a state folded earlier in it. The
job queue's `JobSession` does that to fold each job once per transaction and to
carry a child's end up to its parent atomically; the cron scheduler to submit a
fire's job and record the fire together. Runs are supervised elsewhere (their
nursery tree, `actors/runs/manager.py`); what others ask of a run (a message, a
cut-off end) comes through here too.
"""

from __future__ import annotations

from typing import Any, TypeVar

from gormes.actors.actor import Behavior, State, fold, step
from gormes.events.base import Event
from gormes.events.audit_seal import with_seal
from gormes.events.store import EventStore, Transaction

S = TypeVar("S")
C = TypeVar("C")


def load(tx: Transaction, behavior: Behavior[S, Any], actor_id: str) -> State[S]:
    """The actor's state as its stream holds it, read inside the transaction."""
    return fold(behavior, (r.event for r in tx.read_stream(behavior.stream(actor_id))))


def execute(
    tx: Transaction,
    behavior: Behavior[S, C],
    actor_id: str,
    command: C,
    state: State[S] | None = None,
) -> tuple[tuple[Event, ...], State[S]]:
    """Decide `command` and append its events at the state's version, in `tx`.

    `state`: the actor's current state if it was folded earlier in this
    transaction (read from the stream otherwise). Returns the events appended
    (none when there was nothing to do) and the state after them."""
    before = load(tx, behavior, actor_id) if state is None else state
    events, after = step(behavior, before, command)
    if events:
        tx.append(behavior.stream(actor_id), events, before.version)
    return events, after


async def ask(
    store: EventStore, behavior: Behavior[S, C], actor_id: str, command: C
) -> tuple[tuple[Event, ...], State[S]]:
    """`execute` in a transaction of its own, committed durably before it returns
    (with the audit record of the operation call that asks, if any: audit_seal.py)."""
    return await store.transact(with_seal(lambda tx: execute(tx, behavior, actor_id, command)))


async def read(store: EventStore, behavior: Behavior[S, Any], actor_id: str) -> State[S]:
    """The actor's state as of now, folded from a read of its stream."""
    records = await store.read_stream(behavior.stream(actor_id))
    return fold(behavior, (r.event for r in records))
