"""Which runs a caller may read and steer (run.get, run.timeline, run.send, run.list).

The operator and the system see and steer every run. Any other caller only the
runs that act for it: `run.started` names the trust class and memory scope a
run's tool calls are made with (decision 0016), and a run acts for a caller when
both are the caller's own (a gateway client's agent runs, their subagents and
resumed attempts). Otherwise a message from it would have a wider run act on its
words, and a read would show what that run recalled in a scope it may not read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gormes.events.log_sql import FIRST_OF_STREAM
from gormes.events.runs import RunStarted, run_stream
from gormes.events.sql_fragments import json_text
from gormes.ops.spec import Caller, OperationDenied

if TYPE_CHECKING:
    from gormes.events.store import EventStore

SEES_EVERY_RUN = frozenset({"operator", "system"})
RUN_STREAM_PREFIX = run_stream("")


def acts_for(caller: Caller, started: RunStarted) -> bool:
    """Whether the run that `started` begins acts for `caller` (see the module doc)."""
    from gormes.tools.memory import bound_scope

    if caller.trust in SEES_EVERY_RUN:
        return True
    return started.trust == caller.trust and started.scope == bound_scope(caller, None)


async def require_acts_for(caller: Caller, store: EventStore, run_id: str, what: str) -> None:
    """Refuse a caller that may not `what` run `run_id`, from the run's first event
    alone (read, not the run's whole stream); an unknown run is left to the
    operation (it says so in its own words). A stream whose first event is not a
    `run.started` (its start redacted) cannot be shown to act for the caller, and
    is refused: the check does not lean on the operation to refuse it too."""
    if caller.trust in SEES_EVERY_RUN:
        return
    stream = run_stream(run_id)
    first = await store.read_with(lambda log: log.decode(log.sql.execute(FIRST_OF_STREAM, (stream,)).fetchall()))
    if not first:
        return
    started = first[0].event
    if not isinstance(started, RunStarted):
        raise OperationDenied(
            f"a {caller.trust!r} caller may not {what} run {run_id}: its start is not readable"
            " (redacted), so whom it acts for cannot be checked"
        )
    if not acts_for(caller, started):
        raise OperationDenied(
            f"a {caller.trust!r} caller may not {what} run {run_id}: it acts for another caller"
        )


def own_runs_filter(conn: Any, caller: Caller) -> tuple[str, list[Any]] | None:
    """A SQL condition on `run_id` keeping the runs that act for `caller`, with its
    parameters; None for a caller that sees every run. As `require_acts_for`, from
    a run stream's first event: a `run.started` anywhere else (on a stream not
    named `run-…`, as an older gormes imported; appended to an ended run's stream
    by an import that ignored versions) is not that run's (decision 0086)."""
    from gormes.tools.memory import bound_scope

    if caller.trust in SEES_EVERY_RUN:
        return None
    condition = (
        "run_id IN (SELECT substr(stream, 5) FROM events WHERE type = 'run.started'"
        f" AND version = 1 AND substr(stream, 1, 4) = '{RUN_STREAM_PREFIX}'"
        f" AND {json_text(conn, '$.trust')} = ? AND {json_text(conn, '$.scope')} = ?)"
    )
    return condition, [caller.trust, bound_scope(caller, None)]
