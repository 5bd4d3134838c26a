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


# The schema version a redacted row is stored with (decision 0026): no event
# type has it (they start at 1), so no decoder mistakes a tombstone for data.
REDACTED_SCHEMA_VERSION = 0


class Tombstone(msgspec.Struct, frozen=True, kw_only=True):
    """What a redacted row's data holds instead of the event (decision 0026):
    who removed it, when, why and the sha256 of the stored JSON removed. `seq`
    is kept when the event had one (a run's observation), so the run still
    orders and replay can name it; it is a number, never text."""

    by: str
    at: float  # seconds since the epoch
    reason: str
    sha256: str
    schema_version: int  # the removed data's
    seq: int | None = None


class RedactedEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An event whose data was redacted: its row keeps position, stream, version
    and type; its data is `{"redacted": <Tombstone>}`. Decoding any type stored
    with `REDACTED_SCHEMA_VERSION` gives this, never the type's class."""

    type: str
    redacted: Tombstone
    schema_version: int = REDACTED_SCHEMA_VERSION

    @property
    def seq(self) -> int | None:
        return self.redacted.seq


class Recorded(msgspec.Struct, frozen=True):
    """An event as stored: where it sits in the log and in its stream."""

    position: int
    stream: str
    version: int
    type: str
    event: Event | UnknownEvent | RedactedEvent
    recorded_at: float
