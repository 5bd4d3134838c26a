"""Which earlier child run a resumed run's live spawn takes over.

A resumed run (decision 0011) replays the earlier run's prefix, cut before the
first child that had not finished, and makes everything after the cut again,
live. When its code spawns a child there, it is the same code on the same
history: the k-th spawn after the cut is the k-th spawn the earlier run made
after it, if it asks for the same handler, input, tools and model. If that earlier
child never finished, the continuation resumes it (a new child run with
`resumed_from`) instead of starting it over; a child that had finished, or a spawn
that asks for something else (the code took another path, after which nothing is
matched), starts afresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gormes.actors.replay_context import canonical
from gormes.events.runs import RunChildFinished, RunChildSpawned


class ChildResumption:
    def __init__(self, spawns: Sequence[RunChildSpawned], finished: set[str]) -> None:
        self._spawns = list(spawns)
        self._finished = finished
        self._next = 0

    @classmethod
    def after(cls, observations: Sequence[Any], cut: int) -> ChildResumption:
        """For a run whose first `cut` observations (records) were replayed."""
        spawns = [r.event for r in observations[cut:] if isinstance(r.event, RunChildSpawned)]
        finished = {r.event.child_run_id for r in observations if isinstance(r.event, RunChildFinished)}
        return cls(spawns, finished)

    def take(self, handler: str, input: Any, tools: tuple[str, ...] | None, model: str | None) -> str | None:
        """The earlier child run this spawn resumes, or None (start a new one)."""
        if self._next >= len(self._spawns):
            return None
        earlier = self._spawns[self._next]
        if (earlier.handler, earlier.tools, earlier.model) != (handler, tools, model) or (
            canonical(earlier.input) != canonical(input)  # as replay compares a spawn's input
        ):
            self._next = len(self._spawns)
            return None
        self._next += 1
        return None if earlier.child_run_id in self._finished else earlier.child_run_id
