"""What a redaction does to the projections (decision 0026).

In the redacting transaction, every projection that may hold the removed text
is emptied and its tracking set to 0 (`reset_affected`): the text leaves its
tables (FTS indexes included) in the same commit that leaves the log, and any
runner, in this process or another, folds it again from 0 over the redacted
log, so it ends exactly as a rebuild would. The job ledger, inline, is emptied
and folded again inside that transaction. `catch_up` then brings the emptied
projections back before the caller returns.

A projection is affected when it folds one of the redacted types (its `types`
GLOB patterns, or every type), has folded past the first redacted position, and
does not say `holds_payload = False` (the `streams` projection: names and
positions only).
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from gormes.events.redaction import RedactedEntry
from gormes.projections import bookkeeping, ledger
from gormes.projections.registry import all_projections
from gormes.projections.runner import Projection, ProjectionRunner, reset_in

if TYPE_CHECKING:
    from gormes.events.store import EventStore, Transaction


def affected(projections: Iterable[Projection], entries: Iterable[RedactedEntry], tracked: dict[str, int]) -> list[Projection]:
    """The projections among `projections` a redaction of `entries` reaches;
    `tracked`: each projection's tracked position."""
    entries = list(entries)
    if not entries:
        return []
    types = {e.type for e in entries}
    first = min(e.position for e in entries)
    found = []
    for p in projections:
        if getattr(p, "holds_payload", True) is False or tracked.get(p.name, 0) < first:
            continue
        patterns = getattr(p, "types", None)
        if patterns is None or any(fnmatchcase(t, pattern) for t in types for pattern in patterns):
            found.append(p)
    return found


def reset_affected(tx: Transaction, entries: Iterable[RedactedEntry]) -> list[str]:
    """Inside the redacting transaction: empty what the redaction reaches (the
    ledger is folded again at once); the names of the projections emptied."""
    conn = tx.conn
    bookkeeping.ensure_tables(conn)
    projections = all_projections()
    tracked = {p.name: bookkeeping.tracked_position(conn, p.name) for p in projections}
    names = []
    for p in affected(projections, entries, tracked):
        if p.name == ledger.NAME:
            tx.execute("SELECT 1")  # flush what is staged, so the fold sees it
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
