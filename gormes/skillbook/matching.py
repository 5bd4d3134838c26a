"""How a trigger or an exclusion matches a phrase; pure and deterministic.

A plain trigger ("fork a run") matches when every one of its words appears in the
phrase, in any order, after both are normalised: lower case, punctuation dropped,
filler words (a, the, to, ...) dropped and a crude suffix stem ("forked", "forks"
and "forking" all become "fork"). A trigger starting with `re:` is a regular
expression searched in the lower-cased phrase.

A trigger's weight is how specific it is: its number of words (a regular
expression counts the words in its source). The resolver scores a skill by its
heaviest matching trigger, so "replay a run" outweighs "run".
"""

from __future__ import annotations

import re
from functools import lru_cache

REGEX_PREFIX = "re:"

FILLER: frozenset[str] = frozenset({
    "a", "an", "the", "to", "of", "for", "in", "on", "at", "by", "with", "and", "or",
    "is", "are", "was", "be", "it", "its", "my", "our", "your", "this", "that", "these",
    "those", "me", "i", "we", "you", "please", "can", "could", "would", "some", "from",
})

_WORD = re.compile(r"[a-z0-9]+")


def stem(word: str) -> str:
    for suffix, keep in (("ing", 3), ("ed", 3), ("es", 4), ("s", 3)):
        if word.endswith(suffix) and len(word) - len(suffix) >= keep and not word.endswith("ss"):
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiou":
        word = word[:-1]  # running -> run, cancelled -> cancel (and install -> instal)
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]  # pause / pausing -> paus
    return word


def words(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in _WORD.findall(text.lower()) if w not in FILLER)


def is_regex(trigger: str) -> bool:
    return trigger.startswith(REGEX_PREFIX)


@lru_cache(maxsize=1024)
def compiled(trigger: str) -> re.Pattern[str]:
    """The regular expression of a `re:` trigger; raises `re.error` when invalid."""
    return re.compile(trigger[len(REGEX_PREFIX):].strip(), re.IGNORECASE)


@lru_cache(maxsize=4096)
def _trigger_words(trigger: str) -> frozenset[str]:
    return words(trigger)


def weight(trigger: str) -> int:
    if is_regex(trigger):
        return max(1, len(_WORD.findall(trigger[len(REGEX_PREFIX):].lower())))
    return len(_trigger_words(trigger))


def matches(trigger: str, phrase: str, phrase_words: frozenset[str] | None = None) -> bool:
    """Does `trigger` (or an exclusion, which matches the same way) match `phrase`?"""
    if is_regex(trigger):
        try:
            return compiled(trigger).search(phrase) is not None
        except re.error:
            return False  # the validator reports it; routing treats it as silent
    needed = _trigger_words(trigger)
    if not needed:
        return False
    have = words(phrase) if phrase_words is None else phrase_words
    return needed <= have
