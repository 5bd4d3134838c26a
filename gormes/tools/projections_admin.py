"""The operator's rebuild of projections: projections.rebuild.

Operator-only and never offered to models: a rebuild drops a projection's tables
and folds the whole log into them again, which every reader of them waits out.
`gormes projections rebuild` calls it, audited like every other operation
(decision 0019). `rebuild --check` is a read (the live database is not written)
and stays outside the door, like `projections status`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import msgspec

from gormes.events.postgres_sql import POSTGRES
from gormes.ops.spec import OperationContext, OperationSpec, OperationUnavailable
from gormes.projections import registry
from gormes.projections.runner import Projection
from gormes.projections.maintenance import RebuildResult, on_postgres, rebuild_store

OPERATOR = frozenset({"operator"})
REBUILD_TIMEOUT = 3600.0  # seconds: a large log is folded again from position 0

Name = Annotated[str, msgspec.Meta(min_length=1)]


class RebuildInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Rebuild projections from the start of the log."""

    names: Annotated[list[Name], msgspec.Meta(description="The projections to rebuild (default: all).")] = []


class Rebuilt(msgspec.Struct, kw_only=True):
    rebuilt: list[RebuildResult]  # each projection's name, version and the position it was rebuilt up to
    skipped: list[str] = []  # on PostgreSQL, those that run on SQLite only (when none was named)


async def rebuild(ctx: OperationContext, value: RebuildInput) -> Rebuilt:
    if ctx.store is None:
        raise OperationUnavailable("projections.rebuild needs an event store")
    selected = registry.select(value.names)  # an unknown name is refused, naming the known ones
    skipped: list[str] = []
    if ctx.store.dialect == POSTGRES:
        selected, skipped = on_postgres(selected, named=bool(value.names))
    report = ctx.progress
    if report is None:
        return Rebuilt(rebuilt=await rebuild_store(ctx.store, selected), skipped=skipped)

    def progress_for(projection: Projection) -> Callable[[int, int], None]:
        return lambda position, head: report(projection.name, position, head)

    return Rebuilt(rebuilt=await rebuild_store(ctx.store, selected, progress_for), skipped=skipped)


SPECS = (
    OperationSpec(
        name="projections.rebuild", description="Rebuild projections (all, or those named) from the start of the log.",
        input_type=RebuildInput, output_type=Rebuilt, handler=rebuild, trust=OPERATOR,
        audit_kind="projections.write", mutating=True, idempotent=True, timeout=REBUILD_TIMEOUT,
        write_ahead=True,  # many transactions of derived tables, none the whole rebuild
    ),
)
