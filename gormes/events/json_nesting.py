"""Checks on JSON from outside (the CLI, an operation's input), made before it is decoded.

The decoders recurse once per nesting level, so `[[[[...]]]]` a hundred
thousand deep raised RecursionError on both backends; no event gormes writes is
nested anywhere near `MAX_NESTING`. The scan below is a flat loop over the
brackets outside strings (a regex finds them), and runs only when the text holds
more brackets than the limit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator

from gormes.errors import UserError

MAX_NESTING = 64
# How deep an operation's input may nest (gormes/ops/executor.py): less than a
# line of the log may, by the levels gormes puts around a caller's value. A job's
# data is 2 levels below its exported line's top (`data.data`), a merge job's 3,
# a run's `job.list` of such a job records it 6 below (`data.result.jobs[]
# .data[]`), its `run.timeline` of a run that read it as a message 7: input as
# deep as MAX_NESTING made a log whose export `gormes import` refused (decision
# 0074). The input's value is 1 below its top, so a line is at most 6 deeper
# than the input: 8 leaves 2 to spare.
ENVELOPE_NESTING = 8
MAX_INPUT_NESTING = MAX_NESTING - ENVELOPE_NESTING
# How deep a line of a JSONL file `gormes import` reads (`checked_lines`) may nest:
# what a gormes before decision 0074 wrote, whose executor took input as deep as
# MAX_NESTING, with the envelope around it. A log it wrote holds such lines, and
# its owner's export of it must import (decision 0074's addendum); today's lines
# are 62 deep at most.
MAX_LINE_NESTING = MAX_NESTING + ENVELOPE_NESTING
# A whole string (possessive, so a stray quote cannot make it backtrack) or one bracket.
_STRING_OR_BRACKET = re.compile(rb'"(?:[^"\\]|\\.)*+"|[\[\]{}]', re.DOTALL)
# A whole string, or a run of opening brackets, or of closing ones.
_STRING_OR_BRACKET_RUN = re.compile(rb'"(?:[^"\\]|\\.)*+"|[\[{]++|[\]}]++', re.DOTALL)
_OPENERS = frozenset(b"[{")


def nesting_depth_over(raw: bytes, limit: int = MAX_NESTING) -> bool:
    """Whether arrays and objects in `raw` nest deeper than `limit`."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(raw):
        first = match.group()[0]
        if first in _OPENERS:
            depth += 1
            if depth > limit:
                return True
        elif first != 0x22:  # a closing bracket, not a string
            depth -= 1
    return False


def top_level(raw: bytes) -> object:
    """`raw` parsed with every array and object below its top level read as null,
    or None if that is not JSON: the top level of a value too deep to decode (an
    MCP frame's `id`), found by a flat scan like the one above, over runs of
    brackets rather than single ones, so `[[[[...]]]]` is two steps at any depth."""
    pieces: list[bytes] = []
    depth, kept_from = 0, 0
    for match in _STRING_OR_BRACKET_RUN.finditer(raw):
        start, run = match.start(), match.end() - match.start()
        if raw[start] in _OPENERS:
            if depth < 2 <= depth + run:  # the opener that makes it 2 deep starts a skipped value
                pieces += (raw[kept_from:start + 1 - depth], b"null")
            depth += run
        elif raw[start] != 0x22:  # closing brackets, not a string
            if depth - run < 2 <= depth:  # the closer that brings it back to 1 deep ends it
                kept_from = start + depth - 1
            depth -= run
    if depth < 2:
        pieces.append(raw[kept_from:])
    try:
        return json.loads(b"".join(pieces))
    except ValueError:
        return None


def value_depth_over(value: object, limit: int = MAX_NESTING) -> bool:
    """Whether lists, tuples and dicts in an already parsed `value` (the MCP SDK's
    arguments, a Python caller's dict) nest deeper than `limit`, counted as
    `nesting_depth_over` counts the same value's JSON; a flat walk, no recursion."""
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))
    return False


def check_nesting(raw: str | bytes, what: str, limit: int = MAX_NESTING) -> None:
    """Refuse `raw` in one line if it nests deeper than `limit`."""
    data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw
    if nesting_depth_over(data, limit):
        raise UserError(f"{what} is nested deeper than {limit} levels; refused unread")


def checked_lines(lines: Iterable[str | bytes]) -> Iterator[str | bytes]:
    """The lines of a JSONL input, each checked by `check_nesting` against
    `MAX_LINE_NESTING` (numbered from 1)."""
    for number, line in enumerate(lines, start=1):
        check_nesting(line, f"line {number}", MAX_LINE_NESTING)
        yield line
