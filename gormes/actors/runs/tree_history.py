"""How many runs the log holds under a continued run's copied prefix: what a fork's or
a resumed run's tree starts its count from (tree_cap.py, decision 0063).

A fork or a resumed run copies its source's observations up to a position; the
children spawned in that prefix ended, and are not started again, but their
`run.child_spawned` records are now the continued run's, so they and all their
descendants are runs of its tree, as the log says. Reads the `events` table by
stream, one level of the tree per query (costs.children), SQLite or PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gormes.actors.runs.costs import children
from gormes.events.base import Recorded
from gormes.events.runs import RunChildSpawned
from gormes.events.store import EventStore


def spawned_in(prefix: Sequence[Recorded]) -> list[str]:
    """The children a copied prefix spawned."""
    return [r.event.child_run_id for r in prefix if isinstance(r.event, RunChildSpawned)]


def runs_under(conn: Any, run_ids: Sequence[str]) -> int:
    """`run_ids` and every run the log says they spawned, down the tree, each once."""
    seen = set(run_ids)
    frontier = list(seen)
    while frontier:
        found = [child for _, child in children(conn, frontier) if child not in seen]
        seen.update(found)
        frontier = list(dict.fromkeys(found))
    return len(seen)


async def prefix_tree_runs(store: EventStore, prefix: Sequence[Recorded]) -> int:
    """The runs the children of `prefix` make, with all theirs (0: it spawned none)."""
    spawned = spawned_in(prefix)
    if not spawned:
        return 0
    return await store.read_sql(lambda conn: runs_under(conn, spawned))
