"""Actors: pure behaviors (`actor.py`) run by a supervised trio runtime (`runtime.py`)."""

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
