"""fs.grep searches a file's lines as one text (one RE2 call per file and per
matching line, since the binding releases the GIL around each call); the lines it
finds must be exactly those a search line by line finds."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gormes.tools.fs import GrepAbandoned, _grep_lines, _grep_text, compile_pattern, compile_text_pattern, matching_lines

PATTERNS = [
    "a", "^a", "a$", "^$", "^", "$", "a*", "(a|aa)+$", r"\s", r"a\sb", "[^x]+", "x?", r"\bab\b",
    "(?i)AB", "(?s).b", "é", "^.{3}$", r"\d+", "ab|^b", "b$|^a",
]
LINE = st.text(alphabet="ab xé\t\r1", max_size=8)


def line_by_line(pattern: str, lines: list[str]) -> list[tuple[int, str]]:
    return list(_grep_lines(compile_pattern(pattern, False), lines, threading.Event()))


def as_one_text(pattern: str, lines: list[str]) -> list[tuple[int, str]]:
    whole = compile_text_pattern(pattern, False)
    assert whole is not None
    return list(matching_lines(compile_pattern(pattern, False), whole, lines, threading.Event()))


@settings(max_examples=300, deadline=None)
@given(pattern=st.sampled_from(PATTERNS), text=st.lists(LINE, max_size=12).map("\n".join))
def test_one_text_finds_the_lines_a_search_by_line_finds(pattern: str, text: str):
    lines = text.splitlines()  # as fs.grep splits a file (\r, \x0b, ... end lines too)
    assert as_one_text(pattern, lines) == line_by_line(pattern, lines)


@pytest.mark.parametrize("pattern", [r"\Aab", r"ab\z", "(?-m)^ab", "(?i-m)ab$"])
def test_patterns_bound_to_the_text_are_searched_line_by_line(pattern: str):
    # In one text \A and \z would mean the file's start and end, not each line's.
    assert compile_text_pattern(pattern, False) is None
    assert line_by_line(pattern, ["ab", "ab"]) == [(1, "ab"), (2, "ab")]


def test_a_given_up_search_stops():
    stop = threading.Event()
    stop.set()
    whole = compile_text_pattern("a", False)
    with pytest.raises(GrepAbandoned):
        list(_grep_text(whole, "a\na", stop))
