"""Provider rate limits as configured: which limit applies to which provider and model.

A rule names a limit key pattern (`openai:gpt-4o-mini`, `openai:*`, `*`) and how many
requests and/or tokens it allows per window (a minute unless it says otherwise):

    GORMES_RATE_LIMITS="openai:gpt-4o-mini=500rpm,200000tpm anthropic:*=50rpm"
    GORMES_RATE_LIMITS="openai:gpt-test=3req,2000tok/2s"

Rules are separated by spaces or `;`; the first rule whose pattern matches a key
wins (write the exact ones first). A pattern is matched against each concrete key
(`<provider scheme>:<model>`), and the limit is counted per concrete key: `openai:*`
gives every OpenAI model its own quota, as OpenAI counts them. Pure: no I/O.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping

import msgspec

from gormes.errors import UserError

RATE_LIMITS_ENV = "GORMES_RATE_LIMITS"
OUTAGE_AFTER_ENV = "GORMES_OUTAGE_AFTER"
DEFAULT_OUTAGE_AFTER = 5  # consecutive retryable failures, across every caller
MINUTE = 60.0

_ITEM = re.compile(r"^(\d+)(rpm|tpm|req|tok)$")
_WINDOW = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)?$")


class InvalidRateLimit(UserError):
    """A rate limit rule that cannot be read."""


class RateRule(msgspec.Struct, frozen=True, kw_only=True):
    pattern: str  # fnmatch over `<scheme>:<model>`
    requests: int | None = None  # per window; None: no request limit
    tokens: int | None = None  # input + output per window; None: no token limit
    window_s: float = MINUTE

    def text(self) -> str:
        """The rule as it would be written (what doctor and top show)."""
        if self.window_s == MINUTE:
            items = [f"{self.requests}rpm" if self.requests is not None else "",
                     f"{self.tokens}tpm" if self.tokens is not None else ""]
            return f"{self.pattern}=" + ",".join(i for i in items if i)
        items = [f"{self.requests}req" if self.requests is not None else "",
                 f"{self.tokens}tok" if self.tokens is not None else ""]
        return f"{self.pattern}=" + ",".join(i for i in items if i) + f"/{self.window_s:g}s"


class RateRules(msgspec.Struct, frozen=True):
    rules: tuple[RateRule, ...] = ()

    def for_key(self, key: str) -> RateRule | None:
        return next((r for r in self.rules if fnmatch.fnmatchcase(key, r.pattern)), None)


def limit_key(provider_name: str, model: str) -> str:
    """The key a model turn counts against: the provider's scheme and the model
    (`openai:gpt-4o-mini`), whatever base URL the provider was opened with."""
    scheme = provider_name.partition(":")[0] or "provider"
    return f"{scheme}:{model}"


def _window(text: str, label: str) -> float:
    match = _WINDOW.match(text)
    if not match:
        raise InvalidRateLimit(f"{label}: the window must read like 60s, 1m or 500ms, not {text!r}")
    value = float(match.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[match.group(2)]
    if not value > 0:
        raise InvalidRateLimit(f"{label}: the window must be positive")
    if not math.isfinite(value):  # 400 digits read as a float are infinite
        raise InvalidRateLimit(f"{label}: the window must be finite")
    return value


def parse_limits(text: str, label: str) -> tuple[int | None, int | None, float]:
    """`ITEMS[/WINDOW]` (`500rpm,200000tpm`, `3req,2000tok/2s`) as (requests,
    tokens, window in seconds), a limit not given None; `label` begins each error
    line (`rate limit 'openai:m=5rps'`, or a setting's name and value)."""
    items_text, slash, window_text = text.partition("/")
    window = _window(window_text, label) if slash else MINUTE
    found: dict[str, int] = {}
    for item in items_text.split(","):
        match = _ITEM.match(item.strip())
        if not match:
            raise InvalidRateLimit(
                f"{label}: {item!r} is not a limit (Nrpm, Ntpm, or Nreq, Ntok with a /WINDOW)")
        number, unit = int(match.group(1)), match.group(2)
        if unit in ("rpm", "tpm") and slash:
            raise InvalidRateLimit(f"{label}: {unit} is per minute; with a /WINDOW write req or tok")
        kind = "requests" if unit in ("rpm", "req") else "tokens"
        if kind in found:
            raise InvalidRateLimit(f"{label}: {kind} given twice")
        if number < 1:
            raise InvalidRateLimit(f"{label}: a limit must be 1 or more, not {number}")
        found[kind] = number
    return found.get("requests"), found.get("tokens"), window


def parse_rule(text: str) -> RateRule:
    """One `PATTERN=ITEMS[/WINDOW]` rule (see the module's docstring)."""
    pattern, sep, rest = text.partition("=")
    if not sep or not pattern or not rest:
        raise InvalidRateLimit(f"rate limit {text!r}: expected PATTERN=LIMITS, like openai:gpt-4o=500rpm,200000tpm")
    requests, tokens, window = parse_limits(rest, f"rate limit {text!r}")
    return RateRule(pattern=pattern.strip(), requests=requests, tokens=tokens, window_s=window)


def parse_rules(text: str | None) -> RateRules:
    """Every rule in `text` (spaces or `;` between them); an empty text has none."""
    if not text:
        return RateRules()
    return RateRules(tuple(parse_rule(part) for part in re.split(r"[;\s]+", text.strip()) if part))


def outage_after(value: str | int | None) -> int:
    """Consecutive retryable failures that open the outage guard (0: never)."""
    if value is None or value == "":
        return DEFAULT_OUTAGE_AFTER
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidRateLimit(f"{OUTAGE_AFTER_ENV} must be a whole number, not {value!r}") from None
    if number < 0:
        raise InvalidRateLimit(f"{OUTAGE_AFTER_ENV} must be 0 (off) or more, not {value!r}")
    return number


def rules_from_env(env: Mapping[str, str]) -> tuple[RateRules, int]:
    """(the rules of GORMES_RATE_LIMITS, the threshold of GORMES_OUTAGE_AFTER)."""
    return parse_rules(env.get(RATE_LIMITS_ENV)), outage_after(env.get(OUTAGE_AFTER_ENV))
