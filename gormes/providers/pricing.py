"""What model turns cost, computed when they are read, never stored.

One format, read by one loader. A pricing table is TOML, a version and one table
per model:

    version = "acme-3"   # optional: names the table in every cost shown (default: the file's name)
    [models."gpt-4o*"]   # a model name, or a pattern with `*` wildcards
    input = 2.50         # US dollars per 1M prompt tokens
    output = 10.0        # per 1M completion tokens
    cache_read = 1.25    # per 1M prompt tokens served from the cache (default: input)
    cache_write = 3.75   # per 1M prompt tokens written into the cache (default: input)

Reasoning tokens (`Tokens.reasoning`) are part of `output` and priced as output, as
the vendors bill them; they have no price of their own.

`load_table(path)` is the table every command prices with (`gormes jobs list/get/
stats`, `runs list/show`, `top`, the `run.get` operation): the shipped one
(`gormes/data/pricing.toml`) extended by the file `path` names (`--pricing`), else
by the file `GORMES_PRICING` names, if any; that file's entries win. Its `version`
is the shipped table's (`version` in gormes/data/pricing.toml), then `+` and the
other file's version (or name): every cost shown names it (decision 0035). A file that is
not this format is one `PricingError` line naming the file and the format; that
includes the flat JSON `{"input": ..., "output": ...}` the jobs commands once read:
it priced every model alike, which no entry of a per-model table means (write
`[models."*"]` for a price of every model the table does not list).

A model with no entry has an unknown price: `cost` returns None and `format_cost`
says "unknown price", never $0.

    cost("gpt-4o-mini-2024-07-18", Usage(input=1200, output=300, cache_read=1000))
"""

from __future__ import annotations

import fnmatch
import functools
import math
import os
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated

import msgspec

from gormes.errors import UserError
from gormes.events.jobs import Tokens
from gormes.providers.base import Usage

PRICING_ENV = "GORMES_PRICING"
FORMAT = (
    'an optional version = "NAME", then [models."NAME"] tables with input, output and optional'
    " cache_read, cache_write (US dollars per 1M tokens)"
)

NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class Price(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """US dollars per 1M tokens. Prompt tokens read from the cache cost `cache_read`,
    those written into it (Anthropic bills them apart) `cache_write`, else `input`."""

    input: NonNegative
    output: NonNegative
    cache_read: NonNegative | None = None
    cache_write: NonNegative | None = None


class PricingFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: str | None = None
    models: dict[str, Price] = {}


class PricingError(UserError):
    """A pricing table that cannot be read or does not follow the format."""


class PricingTable:
    def __init__(self, prices: Mapping[str, Price], version: str = "") -> None:
        self.version = version  # what every cost priced with this table names
        self._exact = {name: price for name, price in prices.items() if "*" not in name}
        # Longest pattern first: the most specific pattern wins, whatever the file order.
        self._patterns = sorted(
            ((pattern, price) for pattern, price in prices.items() if "*" in pattern),
            key=lambda item: len(item[0]),
            reverse=True,
        )

    @classmethod
    def load(cls, path: str | Path) -> PricingTable:
        read = _read(Path(path))
        return cls(read.models, read.version or Path(path).name)

    def merged(self, other: PricingTable) -> PricingTable:
        """This table with `other`'s entries added, `other` winning where both price a
        name; its version names both (`2025.1+acme-3`)."""
        return PricingTable({**self._entries(), **other._entries()}, f"{self.version}+{other.version}")

    def _entries(self) -> dict[str, Price]:
        return {**self._exact, **dict(self._patterns)}

    def price(self, model: str) -> Price | None:
        """The price of a model, trying the name as given and without a `vendor/` prefix."""
        for name in dict.fromkeys((model, model.rsplit("/", 1)[-1])):
            if name in self._exact:
                return self._exact[name]
            for pattern, price in self._patterns:
                if fnmatch.fnmatchcase(name, pattern):
                    return price
        return None

    def cost(self, model: str, usage: Usage | Tokens) -> float | None:
        """US dollars for one turn's usage, or None when the model's price is unknown."""
        price = self.price(model)
        if price is None:
            return None
        cached = min(usage.cache_read, usage.input)
        # Tokens (the recorded counts) may not carry cache writes; they then cost `input`.
        written = min(getattr(usage, "cache_write", 0), usage.input - cached)
        read_price = price.input if price.cache_read is None else price.cache_read
        write_price = price.input if price.cache_write is None else price.cache_write
        dollars = (
            (usage.input - cached - written) * price.input + cached * read_price + written * write_price
            + usage.output * price.output
        )
        return dollars / 1_000_000

    def total(self, turns: Iterable[tuple[str, Usage | Tokens]]) -> float | None:
        """US dollars for (model, usage) turns, or None when a model's price is unknown.

        The usage is summed per model first and the models priced in name order, so
        the same turns give the same float whichever command reads them, in whatever
        order (0.0 for no turns)."""
        per_model: dict[str, Usage] = {}
        for model, usage in turns:
            used = Usage(
                input=usage.input, output=usage.output, cache_read=usage.cache_read,
                cache_write=getattr(usage, "cache_write", 0),
            )
            per_model[model] = per_model.get(model, Usage(input=0, output=0)) + used
        dollars = 0.0
        for model in sorted(per_model):
            one = self.cost(model, per_model[model])
            if one is None:
                return None
            dollars += one
        return dollars


def _read(path: Path) -> PricingFile:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise PricingError(f"pricing table {path}: no such file") from None
    except OSError as exc:
        raise PricingError(f"pricing table {path}: cannot read: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise PricingError(f"pricing table {path}: not UTF-8 text; expected TOML: {FORMAT}") from None
    except tomllib.TOMLDecodeError as exc:
        if raw.lstrip()[:1] == b"{":  # the flat JSON the jobs commands once read
            raise PricingError(f"pricing table {path}: this is JSON; the format is TOML: {FORMAT}") from None
        raise PricingError(f"pricing table {path}: not valid TOML: {exc}; expected {FORMAT}") from None
    try:
        return msgspec.convert(data, PricingFile)
    except msgspec.ValidationError as exc:
        raise PricingError(f"pricing table {path}: {' '.join(str(exc).split())}; expected {FORMAT}") from None


@functools.cache
def shipped_table() -> PricingTable:
    with resources.as_file(resources.files("gormes") / "data" / "pricing.toml") as path:
        return PricingTable.load(path)


def load_table(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> PricingTable:
    """The table to price with: the shipped one, extended by the file `path` names
    (`--pricing`), else by the file `GORMES_PRICING` names (read on each call), if any."""
    env = os.environ if env is None else env
    extra = path if path is not None else env.get(PRICING_ENV) or None
    if extra is None:
        return shipped_table()
    return shipped_table().merged(PricingTable.load(extra))


def cost(model: str, usage: Usage | Tokens, table: PricingTable | None = None) -> float | None:
    """US dollars for `usage` on `model`, or None when the price is unknown."""
    return (table or load_table()).cost(model, usage)


def format_cost(dollars: float | None) -> str:
    """`$0.0123`; below a hundredth of a cent, two significant digits in plain
    decimals (`$0.000094`, never `$9.4e-05`)."""
    if dollars is None:
        return "unknown price"
    if dollars == 0:
        return "$0"
    if abs(dollars) >= 0.0001:
        return f"${dollars:.4f}"
    decimals = 1 - math.floor(math.log10(abs(dollars)))
    return f"${dollars:.{decimals}f}"
