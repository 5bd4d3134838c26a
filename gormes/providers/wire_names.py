"""Tool names on the wire: the registry's neutral names (`fs.read`) as the OpenAI
and Anthropic APIs accept them (`^[a-zA-Z0-9_-]{1,64}$`: `fs__read`), and back.

A provider builds one `ToolNames` from a request's own tools, sends `wire(name)`
for each tool and for each tool call in the history, and reads every tool call
of the reply through `neutral(wire_name)`: the exact reverse for the tools it
offered. A name the model invents is turned back best effort (`__` -> `.`), so
the run records what was asked for and denies it. The registry refuses two names
that meet on the wire (`a.b` and `a__b`), so the reverse is exact for them.
"""

from __future__ import annotations

import re

from gormes.errors import UserError
from gormes.ops.registry import wire_name
from gormes.providers.base import ProviderError, ToolSpec

WIRE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class UnsendableToolName(UserError, ProviderError):
    """A tool name no provider can carry: over 64 characters on the wire, or a
    character outside [A-Za-z0-9_-.]. Raised before anything is sent."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        ProviderError.__init__(self, message, retryable=False)


def to_wire(provider: str, name: str) -> str:
    """`name` as the wire carries it, or `UnsendableToolName` saying why it cannot be."""
    wire = wire_name(name)
    if WIRE_NAME.match(wire):
        return wire
    if len(wire) > 64:
        why = f"{len(wire)} characters on the wire ({wire!r}), over the limit of 64"
    elif not wire:
        why = "it is empty"
    else:
        bad = sorted({c for c in wire if not re.match(r"[a-zA-Z0-9_-]", c)})
        why = "it has characters the wire refuses: " + " ".join(repr(c) for c in bad)
    raise UnsendableToolName(f"{provider}: cannot send tool {name!r}: {why}")


def from_wire(wire: str) -> str:
    """The best guess at a neutral name for a wire name nobody offered."""
    return wire.replace("__", ".")


class ToolNames:
    """The names of one request's tools, both ways."""

    def __init__(self, provider: str, tools: tuple[ToolSpec, ...]) -> None:
        self.provider = provider
        self._to_wire = {t.name: to_wire(provider, t.name) for t in tools}
        self._from_wire = {w: n for n, w in self._to_wire.items()}

    def wire(self, name: str) -> str:
        hit = self._to_wire.get(name)
        return hit if hit is not None else to_wire(self.provider, name)

    def neutral(self, wire: str) -> str:
        hit = self._from_wire.get(wire)
        return hit if hit is not None else from_wire(wire)


_cache: dict[tuple[str, int], tuple[tuple[ToolSpec, ...], ToolNames]] = {}


def tool_names(provider: str, tools: tuple[ToolSpec, ...]) -> ToolNames:
    """`ToolNames(provider, tools)`, kept per tools tuple: an agent sends the same
    tuple every turn (see `base.tools_json`)."""
    key = (provider, id(tools))
    hit = _cache.get(key)
    if hit is not None and hit[0] is tools:
        return hit[1]
    names = ToolNames(provider, tools)
    if len(_cache) >= 256:
        _cache.clear()
    _cache[key] = (tools, names)
    return names
