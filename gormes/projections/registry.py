"""The projections gormes knows, by name.

Add a projection by importing it here and listing it in `_all()`; the CLI's
`projections status|rebuild` and the doctor see every one listed.
"""

from __future__ import annotations

from collections.abc import Sequence

from gormes.errors import UserError
from gormes.projections.runner import Projection


def _all() -> list[Projection]:
    from gormes.projections.cron import schedules
    from gormes.projections.ledger import LEDGER
    from gormes.projections.memory import memory_projection
    from gormes.projections.runs import runs
    from gormes.projections.skill_usage import skill_usage
    from gormes.projections.streams import streams

    return [streams, LEDGER, runs, schedules, skill_usage, memory_projection]


def all_projections() -> list[Projection]:
    return _all()


def names() -> list[str]:
    return [p.name for p in _all()]


def get(name: str) -> Projection:
    for projection in _all():
        if projection.name == name:
            return projection
    raise UserError(f"unknown projection {name!r} (known: {', '.join(names())})")


def select(requested: Sequence[str]) -> list[Projection]:
    """The projections named (all of them when none is), in registry order, no repeats."""
    if not requested:
        return _all()
    wanted = {get(name).name for name in requested}
    return [p for p in _all() if p.name in wanted]
