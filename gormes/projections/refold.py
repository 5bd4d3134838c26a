"""Emptying the projections a removal from the log reaches, inside its transaction.

A redaction (decision 0026) and a retention (decision 0029) both take events out
of the log. Every projection that folded one of the removed types past the first
removed position is emptied and its tracking set to 0 in the same transaction,
so any runner folds it again over what remains and it ends as a rebuild would;
the job ledger, inline, is folded again at once. `catch_up` then brings the
emptied projections back before the caller returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from gormes.projections import bookkeeping, ledger
from gormes.projections.registry import all_projections
from gormes.projections.runner import Projection, ProjectionRunner, reset_in

if TYPE_CHECKING:
    from gormes.events.store import EventStore, Transaction


def reached(projections: Iterable[Projection], types: Iterable[str], first: int, tracked: dict[str, int],
            *, payload_only: bool = False) -> list[Projection]:
    """The projections among `projections` that fold one of `types` (their GLOB
    `types`, or every type) and have folded past position `first` (`tracked`: each
    one's tracked position). `payload_only`: leave out those that say
    `holds_payload = False` (names and positions only: a redaction leaves them)."""
    types = set(types)
    found = []
    for p in projections:
        if tracked.get(p.name, 0) < first or (payload_only and getattr(p, "holds_payload", True) is False):
            continue
        patterns = getattr(p, "types", None)
        if patterns is None or any(fnmatchcase(t, pattern) for t in types for pattern in patterns):
            found.append(p)
    return found


def empty_reached(tx: Transaction, types: Iterable[str], first: int, *, payload_only: bool = False) -> list[str]:
    """Empty what a removal of `types` from position `first` on reaches (the ledger
    is folded again at once); the names of the projections emptied."""
    conn = tx.conn
    bookkeeping.ensure_tables(conn)
    projections = all_projections()
    tracked = {p.name: bookkeeping.tracked_position(conn, p.name) for p in projections}
    names = []
    for p in reached(projections, types, first, tracked, payload_only=payload_only):
        if p.name == ledger.NAME:
            tx.flush()  # what is staged, so the fold sees it
            ledger.reset(tx.conn)
            ledger.catch_up(tx.conn)
        else:
            reset_in(tx, p)
        names.append(p.name)
    return names


async def catch_up(store: EventStore, names: Iterable[str]) -> None:
    """Fold the emptied projections again, up to the head (the ledger is current)."""
    wanted = set(names) - {ledger.NAME}
    head = await store.head()
    for p in all_projections():
        if p.name in wanted:
            await ProjectionRunner(store, p).catch_up(upto=head)
