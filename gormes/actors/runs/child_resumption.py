"""Which earlier child run a resumed run's live spawn takes over.

A resumed run (decision 0011) replays the earlier run's prefix, cut before the
first child that had not finished, and makes everything after the cut again,
live. When its code spawns a child there, it is the same code on the same
history: the k-th spawn after the cut is the k-th spawn the earlier run made
after it, if it asks for the same handler, input, tools and model. The
continuation takes that earlier child over (a new child run with `resumed_from`,
see `fork.resumable_run`) instead of starting it over: a child that never finished
continues where it was cut off; one that completed (whether or not the earlier
parent saw it finish) is replayed to its end, so its answer comes back with no
model call and no tool side effect made again. A child that failed, or a spawn
that asks for something else (the code took another path, after which nothing is
matched), starts afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from gormes.actors.runs.replay_context import canonical
from gormes.events.runs import RunChildSpawned

T = TypeVar("T")


class InOrder(Generic[T]):
    """What an earlier run did after the cut, each taken once, in order: the k-th
    ask after the cut is matched with the k-th record; a mismatch ends matching
    (the code took another path)."""

    def __init__(self, recorded: Sequence[T]) -> None:
        self._recorded = list(recorded)
        self._next = 0

    def take_if(self, matches: Callable[[T], bool]) -> T | None:
        if self._next >= len(self._recorded):
            return None
        earlier = self._recorded[self._next]
        if not matches(earlier):
            self._next = len(self._recorded)
            return None
        self._next += 1
        return earlier


class ChildResumption(InOrder[RunChildSpawned]):
    @classmethod
    def after(cls, observations: Sequence[Any], cut: int) -> ChildResumption:
        """For a run whose first `cut` observations (records) were replayed."""
        return cls([r.event for r in observations[cut:] if isinstance(r.event, RunChildSpawned)])

    def take(self, handler: str, input: Any, tools: tuple[str, ...] | None, model: str | None) -> str | None:
        """The earlier child run this spawn matches, or None (start a new one).
        Whether that run can be taken over is `fork.resumable_run`'s to say."""
        earlier = self.take_if(lambda e: (e.handler, e.tools, e.model) == (handler, tools, model)
                               and canonical(e.input) == canonical(input))  # as replay compares a spawn's input
        return None if earlier is None else earlier.child_run_id
