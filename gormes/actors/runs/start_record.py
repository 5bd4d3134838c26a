"""A run's start on its stream, with the audit record of the call that started it.

`gormes run`, `gormes fork` and `gormes runs resume` start their runs through
operations (gormes/tools/run_admin.py). The call's audit record is sealed into
the transaction that appends the new run's `run.started`, so that a process
killed after that commit leaves no run started unaudited. The seal is the
starting call's, taken by the call's own task (gormes/events/audit_seal.py) and
handed to the task that appends the start: never the run's own transactions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gormes.events.runs import run_stream
from gormes.events.store import NO_STREAM

if TYPE_CHECKING:
    from gormes.events.audit_seal import Seal
    from gormes.events.base import Event
    from gormes.events.store import EventStore, Transaction


async def append_start(store: EventStore, run_id: str, events: Sequence[Event], seal: Seal | None) -> None:
    """`events` (`run.started`, and what a continuation carries over) on the new
    run's stream, which must not exist; `seal`: the starting call's, or None (a
    job's run, a subagent: audited where their call is made)."""
    stream = run_stream(run_id)
    if seal is None:
        await store.append(stream, events, expected_version=NO_STREAM)
        return

    def write(tx: Transaction) -> None:
        tx.append(stream, events, expected_version=NO_STREAM)
        seal(tx)

    await store.transact(write)
