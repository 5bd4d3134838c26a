"""The audit seal of the operation call in progress.

The executor seals a call's audit record into the transaction of the call's
change, so that the two commit together and a process killed after the commit
leaves no change unaudited (gormes/ops/executor.py). A handler that runs its own
transaction seals there itself (`OperationContext.seal_audit`). The layers below
a handler whose every command is one transaction (the job queue, the actors'
`ask`) take the call's seal from here (`take_seal`), so that no handler has to
pass it down. The seal is taken once: the first such transaction of the call
carries the record, and the executor appends its own only if none committed.
Only the handler's own task takes it: a task the handler starts (a run's) copies
the context, and must not carry the call's record into a transaction of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from trio.lowlevel import current_task

Seal = Callable[[Any], None]  # seal(tx): the call's audit record into transaction `tx`

_current: ContextVar[tuple[object, Seal] | None] = ContextVar("gormes_audit_seal", default=None)


@contextmanager
def sealing(seal: Seal | None) -> Iterator[None]:
    """`seal` is the call's for the body (the executor, around a handler)."""
    token = _current.set(None if seal is None else (current_task(), seal))
    try:
        yield
    finally:
        _current.reset(token)


def take_seal() -> Seal | None:
    """The seal of the call in progress, if any, not taken yet and set by this
    task; taken now."""
    current = _current.get()
    if current is None or current[0] is not current_task() or getattr(current[1], "used", False):
        return None  # none, another task's, or sealed already by the handler itself
    _current.set(None)
    return current[1]


def with_seal(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`fn(tx)`, then the call's seal into the same transaction, if there is one and
    `fn` appended anything: a command that changed nothing (a submission that joined
    a job, a refusal decided in the transaction) carries no record of a success,
    and the executor appends the call's record once it knows the outcome."""
    seal = take_seal()
    if seal is None:
        return fn

    def sealed(tx: Any) -> Any:
        watched = _Appends(tx)
        result = fn(watched)
        if watched.appended:
            seal(tx)
        return result

    return sealed


class _Appends:
    """A transaction that notes whether anything was appended through it."""

    def __init__(self, tx: Any) -> None:
        self._tx = tx
        self.appended = False

    def append(self, *args: Any, **kwargs: Any) -> Any:
        self.appended = True
        return self._tx.append(*args, **kwargs)

    def append_many(self, *args: Any, **kwargs: Any) -> Any:
        self.appended = True
        return self._tx.append_many(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)
