"""What a redaction does to the projections (decision 0026).

In the redacting transaction, every projection that may hold the removed text
is emptied and its tracking set to 0 (`reset_affected`): the text leaves its
tables (FTS indexes included) in the same commit that leaves the log, and any
runner, in this process or another, folds it again from 0 over the redacted
log, so it ends exactly as a rebuild would. The job ledger, inline, is emptied
and folded again inside that transaction. `catch_up` then brings the emptied
projections back before the caller returns.

The approvals index (gormes/projections/approval_index.py, not a registered
projection: it holds no payload) indexes the approvals whose events were
redacted again, in the same transaction, so a redacted decision's approval is
pending there too.

A projection is affected when it folds one of the redacted types (its `types`
GLOB patterns, or every type), has folded past the first redacted position, and
does not say `holds_payload = False` (the `streams` projection: names and
positions only).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gormes.events.approvals import APPROVALS_STREAM
from gormes.events.base import Recorded
from gormes.events.codec import default_codec
from gormes.events.redaction import RedactedEntry
from gormes.projections import approval_index
from gormes.projections.refold import catch_up, empty_reached, reached
from gormes.projections.runner import Projection

if TYPE_CHECKING:
    from gormes.events.store import Transaction

__all__ = ["affected", "catch_up", "reset_affected"]


def affected(projections: Iterable[Projection], entries: Iterable[RedactedEntry], tracked: dict[str, int]) -> list[Projection]:
    """The projections among `projections` a redaction of `entries` reaches;
    `tracked`: each projection's tracked position."""
    entries = list(entries)
    if not entries:
        return []
    return reached(projections, {e.type for e in entries}, min(e.position for e in entries), tracked,
                   payload_only=True)


def reset_affected(tx: Transaction, entries: Iterable[RedactedEntry]) -> list[str]:
    """Inside the redacting transaction: empty what the redaction reaches (the
    ledger is folded again at once); the names of the projections emptied."""
    entries = list(entries)
    if not entries:
        return []
    approval_index.redacted(tx.conn, lambda rows: default_codec.decode_rows(rows, Recorded),
                            [e.position for e in entries if e.stream == APPROVALS_STREAM])
    return empty_reached(tx, {e.type for e in entries}, min(e.position for e in entries), payload_only=True)
