"""The event base class and the record of a stored event.

Every event is a frozen, keyword-only msgspec Struct tagged with its type name
(`tag="job.claimed"`). Subclassing `Event` with a tag registers the class with the
default codec, so one import of a domain module makes its types decodable.

An event class may declare `schema_version: ClassVar[int]` (default 1). Stored rows
keep the version they were written with; the codec upcasts older shapes on read.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec


class _EventMeta(type(msgspec.Struct)):  # type: ignore[misc]
    """Registers each tagged event class with the default codec as it is defined.

    (msgspec fills in a class's tag after `__init_subclass__` runs, hence a metaclass.)
    """

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kw: Any):  # noqa: N804
        cls = super().__new__(mcls, name, bases, ns, **kw)
        # Only classes given an explicit tag are event types; msgspec would
        # otherwise tag abstract bases with their class name.
        if isinstance(kw.get("tag"), str):
            from gormes.events.codec import default_codec

            default_codec.register(cls)
        return cls


class Event(msgspec.Struct, metaclass=_EventMeta, frozen=True, kw_only=True, tag_field="type"):
    """Base of every gormes event. Subclass with `tag="domain.name"`."""

    schema_version: ClassVar[int] = 1

    @property
    def type(self) -> str:
        return self.__struct_config__.tag  # type: ignore[return-value]


class UnknownEvent(msgspec.Struct, frozen=True):
    """An event whose type tag no registered class declares, kept with its raw data.

    Decoding never fails on an unknown tag: the row is readable, exportable and
    reported by the doctor, and a newer gormes can still make sense of it.
    """

    type: str
    data: Any
    schema_version: int = 1


class Recorded(msgspec.Struct, frozen=True):
    """An event as stored: where it sits in the log and in its stream."""

    position: int
    stream: str
    version: int
    type: str
    event: Event | UnknownEvent
    recorded_at: float
