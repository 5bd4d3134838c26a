"""Actors: the one actor model (`actor.py`), where commands meet it (`runtime.py`),
and one package per kind of actor.

What an actor is here: a stream of events and a `Behavior` (its initial state,
its pure `evolve` and `decide`). Its state is `fold(behavior, its events)`. A
command to it is carried out in one store transaction: fold the stream, decide,
append at the version read (`runtime.execute`). An actor is not a task and has
no mailbox: it lives in the log, and whoever holds the transaction hosts it for
that command. Three kinds exist:

    jobs/   JOB: a durable job. Hosted by the job queue (`JobSession`): claims,
            completions, sweeps, and a child's end carried up to its parent, each
            in one transaction. Its worker runs handlers, not actors.
    cron/   CRON: one schedule. Hosted by `CronBook` and `CronScheduler`, which
            submits a fire's job and records the fire in one transaction.
    runs/   RUN: one agent run. Its handler records what it observes as it goes;
            the run manager supervises runs as a tree of trio nurseries (cancel
            scopes, deadlines) and records their ends; what others ask of a run
            (a message, a cut-off end) is decided by RUN.

`agent_jobs/` is the bridge that drives a run as a job; it adds no kind of
actor. The names below are loaded when first used: importing a submodule (the
job worker's, say) does not import the others with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gormes.actors.actor import Behavior, State, fold, step, struct_version
    from gormes.actors.runtime import ask, execute, load, read

_RUNTIME = ("ask", "execute", "load", "read")

__all__ = [
    "Behavior",
    "State",
    "ask",
    "execute",
    "fold",
    "load",
    "read",
    "step",
    "struct_version",
]


def __getattr__(name: str) -> object:
    if name in _RUNTIME:
        from gormes.actors import runtime

        return getattr(runtime, name)
    if name in __all__:
        from gormes.actors import actor

        return getattr(actor, name)
    raise AttributeError(f"module 'gormes.actors' has no attribute {name!r}")
