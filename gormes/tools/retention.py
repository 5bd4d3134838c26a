"""log.retain: archive the streams that ended before a horizon, then delete them (decision 0029).

Operator-only from the CLI (`gormes retain --older-than DURATION [--dry-run]`),
`system` for the daemon's own policy (`retain_older_than` in its configuration,
docs/retention.md); never offered to models. Each call, a dry run included, is
audited by the executor; a retention that deletes seals its audit record into the
deleting transaction (`OperationContext.seal_audit`), so that no deletion is left
unaudited by a process killed after its commit.

One write transaction chooses the streams (gormes/projections/retention.py),
writes them to a gzip JSONL segment with its manifest, deletes them, appends the
`log.retained` record and empties the projections that folded them (the ledger
is folded again inside it) (gormes/events/retention.py). After the commit the
emptied projections are folded again, and on SQLite the freed pages go back to
the filesystem: `PRAGMA incremental_vacuum` (on a connection of its own) when the file was made with
`auto_vacuum=INCREMENTAL` (every file gormes creates now), then a WAL checkpoint
that truncates the WAL. A file made before keeps its size but reuses the freed
pages for what is written next (docs/retention.md says how to convert it once).
PostgreSQL: the DELETE leaves dead rows that autovacuum reclaims for reuse.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import msgspec
import trio

from gormes.errors import UserError
from gormes.events.postgres_sql import POSTGRES
from gormes.events.redaction import reclaim
from gormes.events.retention import Space, archive_and_delete, incremental_vacuum, manifest_path, space
from gormes.ops.spec import OperationContext, OperationSpec, OperationUnavailable
from gormes.projections import ledger
from gormes.projections import retention as chosen
from gormes.projections.refold import catch_up

if TYPE_CHECKING:
    from gormes.events.store import EventStore, Transaction

RETAINERS = frozenset({"operator", "system"})
RETAIN_TIMEOUT = 3600.0  # a first retention of a large log, and the projections folded again


class RetainInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Archive and delete the streams that ended more than `older_than_s` seconds ago."""

    older_than_s: Annotated[float, msgspec.Meta(ge=0, description="The horizon's age, in seconds.")]
    dry_run: bool = False
    archive: str | None = None  # the segments' directory (SQLite default: beside the file, <name>-archive)


class Retention(msgspec.Struct, kw_only=True):
    dry_run: bool
    horizon: float  # streams whose last event was recorded before this (epoch seconds)
    streams: int
    kinds: dict[str, int]  # streams per kind
    events: int
    first_position: int | None
    last_position: int | None
    data_bytes: int  # their stored JSON (what the log held for them)
    segment: str | None  # the segment written (None: a dry run, or nothing to retain)
    manifest: str | None
    sha256: str | None
    segment_bytes: int
    projections: list[str]  # emptied and folded again
    before: Space
    after: Space


def archive_dir(store: EventStore, given: str | None) -> Path:
    if given:
        return Path(given)
    if store.dialect == POSTGRES:
        raise UserError("name the directory for the archived segments (--archive DIR) on PostgreSQL")
    path = Path(cast(Any, store).path)
    return path.with_name(f"{path.stem}-archive")


def by_of(ctx: OperationContext) -> str:
    return f"{ctx.caller.trust}:{ctx.caller.id}"


async def retain(ctx: OperationContext, value: RetainInput) -> Retention:
    store = ctx.store
    if store is None:
        raise OperationUnavailable("log.retain needs an event store")
    horizon = ctx.clock() - value.older_than_s
    await ledger.install(store)  # the ledger says which jobs are terminal
    before = await store.read_sql(space)
    if value.dry_run:
        selection = await store.read_sql(lambda conn: chosen.select(conn, horizon))
        return _result(selection, None, [], before, before, dry_run=True)
    directory = archive_dir(store, value.archive)
    by = by_of(ctx)

    def write(tx: Transaction) -> tuple[chosen.Selection, Any, list[str]]:
        tx.execute("SELECT 1")  # flush what is staged before us, so the choice sees it
        selection = chosen.select(tx.conn, horizon)
        got = archive_and_delete(tx, selection.streams, directory, by=by, horizon=horizon)
        if got is None:
            return selection, None, []
        manifest = got[1].manifest
        ctx.seal_into(tx)  # the deletion and its audit record commit together
        return selection, got, chosen.reset_affected(tx, manifest.types, manifest.first_position)

    selection, got, names = await store.transact(write)
    if got is not None:
        await catch_up(store, names)
        if store.dialect != POSTGRES:
            await trio.to_thread.run_sync(incremental_vacuum, cast(Any, store).path)
            await store.read_with(reclaim)
    after = await store.read_sql(space)
    return _result(selection, got, names, before, after, dry_run=False)


def _result(selection: chosen.Selection, got: Any, names: list[str], before: Space, after: Space, *,
            dry_run: bool) -> Retention:
    segment = manifest = sha = None
    segment_bytes = 0
    if got is not None:
        path, record = got
        segment, manifest = str(path), str(manifest_path(path))
        sha, segment_bytes = record.manifest.sha256, record.manifest.bytes
    return Retention(
        dry_run=dry_run, horizon=selection.horizon, streams=len(selection.streams), kinds=selection.kinds,
        events=selection.events, first_position=selection.first_position,
        last_position=selection.last_position, data_bytes=selection.data_bytes, segment=segment,
        manifest=manifest, sha256=sha, segment_bytes=segment_bytes, projections=names,
        before=before, after=after,
    )


SPECS = (
    OperationSpec(
        name="log.retain",
        description="Archive the job, run and cron streams that ended before a horizon to a "
        "compressed segment, then delete them from the log (retention).",
        input_type=RetainInput, output_type=Retention, handler=retain, trust=RETAINERS,
        audit_kind="log.retain", mutating=True, idempotent=True, timeout=RETAIN_TIMEOUT,
    ),
)
