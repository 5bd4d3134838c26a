"""Actors: pure behaviors (`actor.py`) run by a supervised trio runtime (`runtime.py`).

The names below are loaded when first used: importing a submodule (the job
worker's, say) does not import the actor runtime with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gormes.actors.actor import (
        ActorAlreadyRunning,
        ActorExit,
        ActorFailed,
        ActorStopped,
        Address,
        Behavior,
        ChildFailed,
        CommandRejected,
        Decision,
        ExitReason,
        RuntimeClosed,
        State,
        fold,
        step,
    )
    from gormes.actors.runtime import ActorRef, ActorRuntime

_RUNTIME = ("ActorRef", "ActorRuntime")

__all__ = [
    "ActorAlreadyRunning",
    "ActorExit",
    "ActorFailed",
    "ActorRef",
    "ActorRuntime",
    "ActorStopped",
    "Address",
    "Behavior",
    "ChildFailed",
    "CommandRejected",
    "Decision",
    "ExitReason",
    "RuntimeClosed",
    "State",
    "fold",
    "step",
]


def __getattr__(name: str) -> object:
    if name in _RUNTIME:
        from gormes.actors import runtime

        return getattr(runtime, name)
    if name in __all__:
        from gormes.actors import actor

        return getattr(actor, name)
    raise AttributeError(f"module 'gormes.actors' has no attribute {name!r}")
