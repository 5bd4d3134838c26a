"""log.redact: the operator's erasure of a stream or an event (decision 0026).

Operator-only and never offered to models; `gormes redact (--stream S |
--position N) --reason TEXT` calls it through the executor, so each redaction
(and each refusal: a gateway caller is denied before anything runs) is audited.
memory.forget erases through `erase` too.

`erase` redacts in transactions of `CHUNK` positions: each replaces its rows'
data by tombstones, appends its `log.redacted` record and empties the
projections that may hold the text, all in one commit, so a process killed
between two leaves a log where every redaction made is whole (run it again to
finish: what is redacted already is skipped). Then the emptied projections are
folded again and, on SQLite, the WAL is truncated (`reclaim`).

log.redact's audit record, and memory.forget's, is sealed into the last chunk's
transaction, the one that completes the redaction (when it redacted anything):
never into an earlier one, whose record would say `ok` for a call that may yet
fail or be killed midway. A process killed between two chunks leaves the chunks
done with their `log.redacted` records (by whom, why, which positions) and no
`audit.operation`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated

import msgspec

from gormes.errors import UserError
from gormes.events.redaction import CHUNK, reclaim, redact_in, redactable, stream_positions
from gormes.ops.spec import OperationContext, OperationSpec, OperationUnavailable
from gormes.projections import redaction as projections

if TYPE_CHECKING:
    from gormes.events.store import EventStore, Transaction

OPERATOR = frozenset({"operator"})
REDACT_TIMEOUT = 3600.0  # a whole large stream, and the projections folded again

Reason = Annotated[str, msgspec.Meta(min_length=1, description="Why (kept in each tombstone).")]


class RedactInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Redact every event of `stream`, or the event at `position` (exactly one)."""

    stream: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    position: Annotated[int, msgspec.Meta(ge=1)] | None = None
    reason: Reason


class Redaction(msgspec.Struct, kw_only=True):
    redacted: int  # events whose data was replaced now (not those redacted before)
    positions: list[int]
    streams: list[str]
    projections: list[str]  # emptied and folded again
    wal_truncated: bool  # SQLite: the WAL holds no old page (always true on PostgreSQL)


def by_of(ctx: OperationContext) -> str:
    return f"{ctx.caller.trust}:{ctx.caller.id}"


async def erase(
    store: EventStore, positions: Sequence[int], *, by: str, reason: str,
    seal: Callable[[Transaction], None] | None = None,
) -> Redaction:
    """Redact `positions` (see the module doc); `seal(tx)` is written in the last
    chunk's transaction if that chunk redacted anything (the call's audit record)."""
    wanted = sorted(set(positions))
    done: list[int] = []
    streams: set[str] = set()
    emptied: list[str] = []
    for i in range(0, len(wanted), CHUNK):
        chunk = wanted[i : i + CHUNK]
        last = i + CHUNK >= len(wanted)

        def write(
            tx: Transaction, chunk: list[int] = chunk, last: bool = last,
        ) -> tuple[list[int], set[str], list[str]]:
            record = redact_in(tx, chunk, by=by, reason=reason)
            if record is None:
                return [], set(), []
            names = projections.reset_affected(tx, record.entries)
            if last and seal is not None:
                seal(tx)
            return [e.position for e in record.entries], {e.stream for e in record.entries}, names

        got, in_streams, names = await store.transact(write)
        done += got
        streams |= in_streams
        emptied += [n for n in names if n not in emptied]
    await projections.catch_up(store, emptied)
    truncated = await store.read_with(reclaim) if done else True
    return Redaction(redacted=len(done), positions=done, streams=sorted(streams), projections=emptied,
                     wal_truncated=truncated)


async def redact(ctx: OperationContext, value: RedactInput) -> Redaction:
    store = ctx.store
    if store is None:
        raise OperationUnavailable("log.redact needs an event store")
    if (value.stream is None) == (value.position is None):
        raise UserError("name exactly one of a stream or a position to redact")
    if value.stream is not None:
        stream = value.stream
        if not redactable(stream):
            raise UserError(f"stream {stream!r} holds audit, redaction or import records, which are never redacted")
        positions = await store.read_sql(lambda conn: stream_positions(conn, stream))
        if not positions:
            raise UserError(f"no events on stream {stream!r}")
    else:
        position = value.position
        assert position is not None
        if not 1 <= position <= await store.head():
            raise UserError(f"no event at position {position}")
        positions = [position]
    return await erase(store, positions, by=by_of(ctx), reason=value.reason, seal=ctx.seal_into)


SPECS = (
    OperationSpec(
        name="log.redact",
        description="Replace the data of a stream's events, or of one event, by tombstones (erasure).",
        input_type=RedactInput, output_type=Redaction, handler=redact, trust=OPERATOR,
        audit_kind="log.redact", mutating=True, idempotent=True, timeout=REDACT_TIMEOUT,
    ),
)
