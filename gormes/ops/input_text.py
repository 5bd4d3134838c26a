"""No string field of an operation's input holds U+0000 (NUL) (decision 0074).

PostgreSQL's text cannot hold NUL, and SQLite's can. A job's name, its keys, a
fact, an entity's name: each becomes a text column of a projection (the job
ledger, memory's tables). A gateway's `job.submit` named `"ec\\u0000ho"` was
recorded on SQLite; once the log was moved to PostgreSQL (`gormes migrate`,
`gormes import`) the ledger could not be built ("PostgreSQL text fields cannot
contain NUL (0x00) bytes"), and with it every job command, worker and write of
that log failed; a fact with one stopped the memory projection there.

So a string in a typed field of the input (a `str` the input's Struct declares,
at any depth: `options.idempotency_key`, `relation.subject`) with U+0000 is bad
input, refused before the handler runs. Free JSON (a field typed `Any`: a job's
data, a message's payload) may hold it, as the log's JSON text escapes it and
every read through jsonb replaces it (gormes/events/sql_fragments.py).

A string anywhere in the input (a typed field or free JSON) holding a lone
surrogate (U+D800-U+DFFF: no character, and UTF-8 cannot encode it) is bad input
too (decision 0077). JSON text cannot carry one (msgspec refuses `"\\ud800"`
alone), but a Python caller's str can (a run's handler, `Executor.call` given a
dict; Python's own `surrogateescape` makes them of undecodable bytes: a file
name, an argument): no event could record it. The executor finds it where it
encodes every input anyway (its digest); `surrogate_at` only names the field.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
import msgspec.inspect as mi

NUL = "\x00"


@functools.cache
def _type_info(input_type: type) -> mi.Type:
    return mi.type_info(input_type)


def nul_field(input_type: type, value: Any) -> str | None:
    """The path of the first string field of `value` (an `input_type`) that holds
    U+0000, or None. Only fields the type declares as strings are looked at."""
    pending: list[tuple[mi.Type, Any, str]] = [(_type_info(input_type), value, "input")]
    while pending:
        kind, item, path = pending.pop()
        while isinstance(kind, mi.Metadata):
            kind = kind.type
        if item is None or isinstance(kind, (mi.AnyType, mi.LiteralType)):
            continue
        if isinstance(kind, mi.UnionType):
            pending.extend((member, item, path) for member in kind.types if _fits(member, item))
        elif isinstance(kind, mi.StrType):
            if isinstance(item, str) and NUL in item:
                return path
        elif isinstance(kind, mi.StructType):
            if isinstance(item, kind.cls):
                pending.extend((f.type, getattr(item, f.name), f"{path}.{f.name}") for f in kind.fields)
        elif isinstance(kind, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
            pending.extend((kind.item_type, element, f"{path}[{i}]") for i, element in enumerate(item))
        elif isinstance(kind, mi.TupleType):
            pending.extend((t, element, f"{path}[{i}]") for i, (t, element) in enumerate(zip(kind.item_types, item)))
        elif isinstance(kind, mi.DictType):
            for key, element in item.items():
                pending += [(kind.key_type, key, f"{path} key"), (kind.value_type, element, f"{path}[]")]
    return None


def _fits(member: mi.Type, item: Any) -> bool:
    """Whether `item` is a value of the union's `member` (the walk follows only that one)."""
    while isinstance(member, mi.Metadata):
        member = member.type
    if isinstance(member, mi.StrType):
        return isinstance(item, str)
    if isinstance(member, mi.StructType):
        return isinstance(item, member.cls)
    return not isinstance(item, (str, msgspec.Struct))


def surrogate_at(value: Any, root: str = "input") -> tuple[str, str] | None:
    """The path of the first string of `value` (a decoded input or a tool call's
    arguments: Structs, dicts, lists, strings; keys too) that holds a lone
    surrogate, and that code point as `U+XXXX`; None if no string does. Named as
    `nul_field` names a field: a dict's keys and values by `key` and `[]`, never
    by the caller's text. A container met twice (a Python value may hold a cycle) is
    walked once."""
    pending: list[tuple[Any, str]] = [(value, root)]
    seen: set[int] = set()
    while pending:
        item, path = pending.pop()
        if not isinstance(item, str):
            if id(item) in seen:
                continue
            seen.add(id(item))
        if isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError as exc:
                return path, f"U+{ord(item[exc.start]):04X}"
        elif isinstance(item, msgspec.Struct):
            pending.extend((getattr(item, name), f"{path}.{name}") for name in reversed(item.__struct_fields__))
        elif isinstance(item, dict):
            for key, element in reversed(item.items()):
                pending += [(element, f"{path}[]"), (key, f"{path} key")]
        elif isinstance(item, (list, tuple, set, frozenset)):
            pending.extend((element, f"{path}[{i}]") for i, element in reversed(list(enumerate(item))))
    return None


def surrogate_text(value: Any, root: str = "input") -> str:
    """Why `value` cannot be encoded (it holds a lone surrogate), naming where."""
    found = surrogate_at(value, root)
    what = f"{found[0]} holds {found[1]}, a lone surrogate," if found else f"{root} holds a lone surrogate,"
    return f"{what} which UTF-8 cannot encode (no event could record it)"


def text_surrogate(exc: UnicodeEncodeError) -> str:
    """Why a str of JSON text cannot be encoded, from the encoder's error."""
    code = ord(exc.object[exc.start])
    return (f"the text holds U+{code:04X}, a lone surrogate, at character {exc.start},"
            " which UTF-8 cannot encode (no event could record it)")
