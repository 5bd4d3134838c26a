"""The codec: round-trips for every registered event type, upcasting, unknown types."""

from __future__ import annotations

import typing

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gormes.errors import InvalidEventData, UnknownEventType
from gormes.events.base import Event, UnknownEvent
from gormes.events.catalog import load_all
from gormes.events.codec import Codec, default_codec

load_all()

EVENT_TYPES = sorted(default_codec.all_classes(), key=lambda c: c.__struct_config__.tag)


JSON_SAFE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


def strategy_for(hint: typing.Any) -> st.SearchStrategy:
    """Values of a field's type that JSON can carry exactly (no NaN, no infinities)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return JSON_SAFE
    if hint is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return st.one_of(*(strategy_for(a) for a in args))
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), strategy_for(args[1]), max_size=4)
    if origin is list:
        return st.lists(strategy_for(args[0]), max_size=4)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0]), max_size=4).map(tuple)
        return st.tuples(*(strategy_for(a) for a in args))
    if origin is typing.Literal:
        return st.sampled_from(args)
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return event_strategy(hint)
    return st.from_type(hint)


def event_strategy(cls: type) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls)
    fields = {name: strategy_for(hints[name]) for name in cls.__struct_fields__}
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


def test_every_domain_module_registered_some_types():
    assert "note.added" in default_codec.types()


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__struct_config__.tag)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_event_type_round_trips_through_storage(cls, data):
    event = data.draw(event_strategy(cls))
    tag, version, text = default_codec.encode(event)
    assert tag == cls.__struct_config__.tag
    assert version == cls.schema_version
    assert isinstance(text, str)
    assert default_codec.decode(tag, version, text) == event
    assert default_codec.decode(tag, version, text.encode()) == event


def test_unknown_tags_decode_to_unknown_event_with_raw_data():
    decoded = default_codec.decode("from.the.future", 3, '{"a": [1, 2]}')
    assert decoded == UnknownEvent(type="from.the.future", data={"a": [1, 2]}, schema_version=3)
    # and it can be written back unchanged (export/import, migration)
    assert default_codec.encode(decoded) == ("from.the.future", 3, '{"a":[1,2]}')


def test_corrupt_rows_never_raise():
    assert isinstance(default_codec.decode("note.added", 1, "{not json"), UnknownEvent)
    assert isinstance(default_codec.decode("note.added", 1, '{"text": 5}'), UnknownEvent)


def test_upcasters_turn_old_shapes_into_the_current_type():
    codec = Codec()

    class Renamed(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="t.renamed"):
        schema_version: typing.ClassVar[int] = 3
        title: str
        size: int

    codec.register(Renamed)

    @codec.upcaster("t.renamed", from_version=1)
    def v1_to_v2(raw):
        raw["title"] = raw.pop("name")
        return raw

    @codec.upcaster("t.renamed", from_version=2)
    def v2_to_v3(raw):
        raw.setdefault("size", 0)
        return raw

    assert codec.decode("t.renamed", 1, '{"name": "x"}') == Renamed(title="x", size=0)
    assert codec.decode("t.renamed", 2, '{"title": "y"}') == Renamed(title="y", size=0)
    assert codec.decode("t.renamed", 3, '{"title": "z", "size": 2}') == Renamed(title="z", size=2)
    codec.alias("t.old", "t.renamed")
    assert codec.decode("t.old", 1, '{"name": "a"}') == Renamed(title="a", size=0)
    # a version newer than the class: kept raw, not guessed at
    assert isinstance(codec.decode("t.renamed", 4, '{"title": "n"}'), UnknownEvent)


def test_parse_is_strict_and_names_the_problem():
    with pytest.raises(UnknownEventType, match="unknown event type 'nope'"):
        default_codec.parse("nope", "{}")
    with pytest.raises(InvalidEventData, match="malformed JSON"):
        default_codec.parse("note.added", "{oops")
    with pytest.raises(InvalidEventData, match="text"):
        default_codec.parse("note.added", '{"text": 1}')
    with pytest.raises(InvalidEventData, match="JSON object"):
        default_codec.parse("note.added", "[1]")
    assert default_codec.parse("note.added", '{"text": "hi"}').text == "hi"


def test_an_unregistered_event_class_cannot_be_encoded():
    class Stray(msgspec.Struct, tag="stray"):
        pass

    with pytest.raises(UnknownEventType):
        default_codec.encode(Stray())


def test_declaring_one_tag_twice_is_an_error():
    with pytest.raises(TypeError, match="declared twice"):

        class Duplicate(Event, tag="note.added"):
            other: int


def test_a_class_declared_again_under_its_tag_replaces_the_old_one_for_encoding():
    # (a module reloaded: same qualified name, new class object)
    codec = Codec()

    def declare() -> type:
        class Again(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="t.again"):
            schema_version: typing.ClassVar[int] = 1
            n: int

        return Again

    old, new = declare(), declare()
    codec.register(old)
    assert codec.encode(old(n=1)) == ("t.again", 1, '{"type":"t.again","n":1}')
    codec.register(new)
    assert codec.encode(new(n=2)) == ("t.again", 1, '{"type":"t.again","n":2}')
    with pytest.raises(UnknownEventType):
        codec.encode(old(n=3))


def test_decoding_rows_gives_what_decode_gives_row_by_row():
    codec = Codec()

    class Current(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="t.rows"):
        schema_version: typing.ClassVar[int] = 2
        title: str

    codec.register(Current)

    @codec.upcaster("t.rows", from_version=1)
    def v1_to_v2(raw):
        raw["title"] = raw.pop("name")
        return raw

    stored = [
        ("t.rows", 2, '{"type":"t.rows","title":"now"}'),  # current
        ("t.rows", 1, '{"name":"then"}'),  # upcast
        ("t.rows", 2, '{"title": 5}'),  # invalid data
        ("t.rows", 2, "{not json"),  # corrupt
        ("t.nobody", 1, '{"a": 1}'),  # unknown tag
    ]
    rows = [(i + 1, "s", i + 1, tag, tv, data, 0.5) for i, (tag, tv, data) in enumerate(stored)]
    got = codec.decode_rows(rows, lambda *fields: fields)
    assert got == [
        (i + 1, "s", i + 1, tag, codec.decode(tag, tv, data), 0.5)
        for i, (tag, tv, data) in enumerate(stored)
    ]
    assert got[0][4] == Current(title="now") and got[1][4] == Current(title="then")
    assert [type(g[4]) for g in got[2:]] == [UnknownEvent] * 3
