"""The counter of the gateways' calls the call rate refused, for `/metrics` (decision 0079).

Each refusal is one audit record, and the log keeps every one (a flood writes
hundreds a second), so the counter is not folded from the log as the others are
(every row since position 0 when the daemon starts): it reads the index the
database keeps of the refusals (`events_call_refused`, decision 0075), and only
the refusals recorded since the last scrape.

The index is ordered by `recorded_at`, not by position, so a scrape reads the
entries recorded since a little before the head the last scrape saw
(`call_refusals.CLOCK_SLACK_S` before it) and counts those past that head's
position: each refusal once, whatever the order of the rows' times, as long as no
refusal is recorded with a clock more than the slack behind the latest record
before it (a clock stepped back, hosts' clocks apart; decision 0072 already asks
hosts' clocks to agree). A scrape costs the refusals it counts and those of the
slack, never the log.

The counter starts at 0 when the daemon starts (`begin`: the log's head then),
as a process's counters do; Prometheus' `rate` and `increase` read a restart as a
reset, and its `_created` sample says when it began. Counting the refusals
recorded before would read every one of them, which a flood makes millions.

With no index the counter cannot count: it stays where it is and does not move
on, so the refusals are counted once an index is made (a `gormes mcp` makes it
before its first limited call, and any refusal of this gormes comes after it).
It is shown when it counts, or when no gateway call was ever limited on the
database (no refusal then); otherwise `known` is False and the metric is left out.
"""

from __future__ import annotations

import time
from typing import Any

from gormes.control import call_refusals
from gormes.control.call_rate import KEY
from gormes.events.store import EventStore


class RefusalCount:
    """The refusals recorded since `begin`: `total`, and whether it could count (`known`)."""

    def __init__(self) -> None:
        self.total = 0
        self.known = False
        self.started_at: float | None = None  # seconds since the epoch, when it began
        self._after = 0  # counted up to this log position
        self._since = 0.0  # reading the index from this `recorded_at`

    async def begin(self, store: EventStore) -> None:
        """Count from the log's head now (once; the first `fold` calls it if nobody did)."""
        if self.started_at is not None:
            return
        found = await store.read_sql(call_refusals.head)
        self._move_to(found)
        self.started_at = time.time()

    async def fold(self, store: EventStore) -> None:
        await self.begin(store)
        after, since = self._after, self._since
        found, counted, limited = await store.read_sql(lambda conn: _step(conn, after, since))
        if counted is None:
            self.known = not limited
            return
        self.total += counted
        self.known = True
        self._move_to(found)

    def _move_to(self, found: call_refusals.Head) -> None:
        self._after = found.position
        if found.recorded_at is not None:
            self._since = found.recorded_at - call_refusals.CLOCK_SLACK_S


def _step(conn: Any, after: int, since: float) -> tuple[call_refusals.Head, int | None, bool]:
    # the head first: a refusal at or before it was recorded after its index was made,
    # so an index found missing after this read has none of them to count
    found = call_refusals.head(conn)
    counted = call_refusals.refused_after(conn, after, found.position, since)
    limited = counted is None and call_refusals.leases(conn, KEY, 0.0).latest_at is not None
    return found, counted, limited
