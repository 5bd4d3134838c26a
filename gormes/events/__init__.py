"""Typed events, their codec and the stores that keep them.

This package imports nothing else of gormes (but `gormes.errors`).
"""

from gormes.events.base import Event, Recorded, UnknownEvent
from gormes.events.codec import Codec, default_codec
from gormes.events.store import ANY, NO_STREAM, AppendRequest, AppendResult, EventStore

__all__ = [
    "ANY",
    "NO_STREAM",
    "AppendRequest",
    "AppendResult",
    "Codec",
    "Event",
    "EventStore",
    "Recorded",
    "UnknownEvent",
    "default_codec",
]
