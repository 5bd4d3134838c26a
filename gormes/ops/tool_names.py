"""A tool allowlist given by a person or a caller (`gormes run --tools`, an agent
job's `tools`, run.submit's `tools`) names operations that exist: a misspelled
name is refused before anything is recorded (decision 0090), not taken as one
tool fewer (a run whose every tool was misspelled had none).

The check is pure: `unknown_tool` says what is wrong with a list, given the names
the caller knows of (a registry's, plus whatever its caller adds)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from gormes.errors import UserError

# Names a list may hold that no registry lists: the agent's own subagent tool.
ALWAYS_KNOWN = ("agent.spawn",)


class UnknownTool(UserError):
    """A tool allowlist names an operation that does not exist here."""


def unknown_tool(asked: Iterable[str] | None, known: Iterable[str], *,
                 unchecked_prefixes: tuple[str, ...] = ()) -> str | None:
    """The first name of `asked` not in `known` (nor under `unchecked_prefixes`),
    said with the nearest known names; None when every name is known."""
    if asked is None:
        return None
    names = {*known, *ALWAYS_KNOWN}
    for name in asked:
        if name in names or name.startswith(unchecked_prefixes):
            continue
        near = difflib.get_close_matches(name, sorted(names), n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(near)}?" if near else "`gormes ops list` lists them"
        return f"unknown tool {name!r} ({hint})"
    return None


def check_tools(asked: Iterable[str] | None, known: Iterable[str], where: str, *,
                unchecked_prefixes: tuple[str, ...] = ()) -> None:
    """Raise UnknownTool naming `where` (the option or field) and the unknown name."""
    found = unknown_tool(asked, known, unchecked_prefixes=unchecked_prefixes)
    if found is not None:
        raise UnknownTool(f"{where}: {found}")
