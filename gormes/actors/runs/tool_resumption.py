"""Which earlier tool call a resumed run's live call is served from.

A resumed run (decision 0011) replays the earlier run's prefix, cut before the
first child that had not finished, and makes everything after the cut again,
live. The earlier run may have called tools after that spawn and before it was
cut off (the agent starts a turn's spawns first, then makes its other calls), and
their records are in its stream. Made again, a `job.submit` would submit a second
job (an attacker's finding). So, as a live spawn after the cut takes over the
earlier child (child_resumption.py), a live call after the cut is served from the
earlier run's record of the same call: the k-th call after the cut is the k-th
call the earlier run recorded after it, if it asks for the same operation with
the same arguments (the same code on the same history). The call is recorded
again, with the earlier outcome and result, and nothing runs. A call that asks
for something else (the code took another path, after which nothing is matched),
or one beyond what was recorded, runs live.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gormes.actors.runs.child_resumption import InOrder
from gormes.events.runs import RunToolCalled


class ToolResumption(InOrder[RunToolCalled]):
    @classmethod
    def after(cls, observations: Sequence[Any], cut: int) -> ToolResumption:
        """For a run whose first `cut` observations (records) were replayed."""
        return cls([r.event for r in observations[cut:] if isinstance(r.event, RunToolCalled)])

    def take(self, operation: str, args_hash: str) -> RunToolCalled | None:
        """The earlier run's record of this call, or None (make it live)."""
        return self.take_if(lambda e: (e.operation, e.args_hash) == (operation, args_hash))
