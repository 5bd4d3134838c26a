"""One codec for every event: encode by tag, decode by tag, upcast old shapes.

Events are stored as msgspec JSON text (readable with SQLite's json_extract).
Decoding never raises for data already in the log: a tag nobody registered, or a
row that no longer fits its class, comes back as an `UnknownEvent` with its raw
data. Input from people (the CLI, JSONL import) goes through `parse`, which is
strict and raises a `UserError` naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from gormes.errors import InvalidEventData, UnknownEventType
from gormes.events.base import REDACTED_SCHEMA_VERSION, RedactedEvent, Tombstone, UnknownEvent

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class Codec:
    def __init__(self) -> None:
        self._classes: dict[str, type] = {}
        self._tags: dict[type, str] = {}  # registered class -> its tag, for encode
        # tag -> (current schema version, its decode), for `decode_rows`
        self._current: dict[str, tuple[int, Callable[[str | bytes], Any]]] = {}
        self._decoders: dict[str, msgspec.json.Decoder] = {}
        self._upcasters: dict[tuple[str, int], Upcaster] = {}
        self._aliases: dict[str, str] = {}
        self._encoder = msgspec.json.Encoder()
        self._raw = msgspec.json.Decoder()

    # -- registration -------------------------------------------------------

    def register(self, cls: type) -> None:
        tag = cls.__struct_config__.tag  # type: ignore[attr-defined]
        known = self._classes.get(tag)
        if known is not None and known is not cls and known.__qualname__ != cls.__qualname__:
            raise TypeError(f"event type {tag!r} is declared twice: {known} and {cls}")
        if known is not None:
            self._tags.pop(known, None)
        self._classes[tag] = cls
        self._tags[cls] = tag
        self._decoders[tag] = msgspec.json.Decoder(cls)
        self._current[tag] = (cls.schema_version, self._decoders[tag].decode)

    def upcaster(self, tag: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Register a function turning data of `tag` at `from_version` into `from_version + 1`."""

        def decorate(fn: Upcaster) -> Upcaster:
            self._upcasters[(tag, from_version)] = fn
            return fn

        return decorate

    def alias(self, old_tag: str, new_tag: str) -> None:
        """Decode rows stored under a tag that was renamed."""
        self._aliases[old_tag] = new_tag

    def types(self) -> list[str]:
        return sorted(self._classes)

    def class_for(self, tag: str) -> type | None:
        return self._classes.get(self._aliases.get(tag, tag))

    def all_classes(self) -> Iterable[type]:
        return self._classes.values()

    # -- encoding -----------------------------------------------------------

    def encode(self, event: Any) -> tuple[str, int, str]:
        """Return (type, schema_version, json text) for storage."""
        cls = type(event)
        tag = self._tags.get(cls)
        if tag is None:
            if isinstance(event, UnknownEvent):
                return event.type, event.schema_version, self._encoder.encode(event.data).decode()
            if isinstance(event, RedactedEvent):
                return event.type, REDACTED_SCHEMA_VERSION, self._encoder.encode(_Redacted(event.redacted)).decode()
            raise UnknownEventType(f"event class {cls.__qualname__} is not registered")
        return tag, cls.schema_version, self._encoder.encode(event).decode()

    # -- decoding -----------------------------------------------------------

    def decode(self, tag: str, schema_version: int, data: str | bytes) -> Any:
        """Decode a stored row; never raises for malformed or unknown rows."""
        if schema_version == REDACTED_SCHEMA_VERSION:
            try:
                return RedactedEvent(type=tag, redacted=_tombstone_decoder.decode(data).redacted)
            except msgspec.DecodeError:
                return UnknownEvent(type=tag, data=_text(data), schema_version=schema_version)
        cls = self._classes.get(tag)
        if cls is not None and schema_version == cls.schema_version:
            try:
                return self._decoders[tag].decode(data)
            except msgspec.ValidationError:
                pass
            except msgspec.DecodeError:
                return UnknownEvent(type=tag, data=_text(data), schema_version=schema_version)
        try:
            raw = self._raw.decode(data)
        except msgspec.DecodeError:
            return UnknownEvent(type=tag, data=_text(data), schema_version=schema_version)
        try:
            return self.from_dict(tag, schema_version, raw)
        except (UnknownEventType, InvalidEventData):
            return UnknownEvent(type=tag, data=raw, schema_version=schema_version)

    def decode_rows(self, rows: Iterable[tuple[Any, ...]], make: Callable[..., Any]) -> list[Any]:
        """`make(position, stream, version, type, event, recorded_at)` for each stored row
        `(position, stream, version, type, schema_version, data, recorded_at)`.

        The same as calling `decode` on each row, with the common case (a registered
        type at its current schema version, valid data) written out in one loop.
        """
        current = self._current
        out = []
        add = out.append
        for pos, stream, version, tag, tv, data, at in rows:
            fast = current.get(tag)
            if fast is not None and fast[0] == tv:
                try:
                    event = fast[1](data)
                except msgspec.DecodeError:  # (ValidationError too) the careful path decides
                    event = self.decode(tag, tv, data)
            else:
                event = self.decode(tag, tv, data)
            add(make(pos, stream, version, tag, event, at))
        return out

    def from_dict(self, tag: str, schema_version: int, raw: Any) -> Any:
        """Upcast and validate a raw mapping; raises `UserError`s naming the problem."""
        tag = self._aliases.get(tag, tag)
        cls = self._classes.get(tag)
        if cls is None:
            raise UnknownEventType(f"unknown event type {tag!r}")
        if not isinstance(raw, dict):
            raise InvalidEventData(f"data for {tag!r} must be a JSON object")
        if schema_version == REDACTED_SCHEMA_VERSION:  # a tombstone, as exported
            try:
                return RedactedEvent(type=tag, redacted=msgspec.convert(raw, _Redacted).redacted)
            except msgspec.ValidationError as exc:
                raise InvalidEventData(f"invalid tombstone for {tag!r}: {exc}") from None
        version = schema_version
        while version < cls.schema_version:
            step = self._upcasters.get((tag, version))
            if step is None:
                raise InvalidEventData(
                    f"no upcaster for {tag!r} from schema version {version}"
                )
            raw = step(dict(raw))
            version += 1
        if version > cls.schema_version:
            raise InvalidEventData(
                f"{tag!r} data has schema version {version}, newer than this gormes knows"
            )
        raw = {k: v for k, v in raw.items() if k != "type"}
        try:
            return msgspec.convert(raw, cls)
        except msgspec.ValidationError as exc:
            raise InvalidEventData(f"invalid data for {tag!r}: {exc}") from None

    def parse(self, tag: str, data: str | bytes | dict[str, Any], schema_version: int | None = None) -> Any:
        """Strictly parse event data given by a person (JSON text or a mapping)."""
        cls = self.class_for(tag)
        if cls is None:
            raise UnknownEventType(
                f"unknown event type {tag!r} (known: {', '.join(self.types()) or 'none'})"
            )
        if isinstance(data, (str, bytes)):
            try:
                data = self._raw.decode(data)
            except msgspec.DecodeError as exc:
                raise InvalidEventData(f"malformed JSON for {tag!r}: {exc}") from None
        return self.from_dict(tag, cls.schema_version if schema_version is None else schema_version, data)


class _Redacted(msgspec.Struct, frozen=True):
    """A redacted row's stored data: `{"redacted": {...}}`."""

    redacted: Tombstone


_tombstone_decoder = msgspec.json.Decoder(_Redacted)


def _text(data: str | bytes) -> str:
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


default_codec = Codec()
