"""What a model turn cost, computed when it is read, never stored.

Prices come from `gormes/data/pricing.toml` (shipped), merged with the TOML file
that `GORMES_PRICING` names, if any (its entries win). A model with no entry has an
unknown price: `cost` returns None and `format_cost` says "unknown price", never $0.

    cost("gpt-4o-mini-2024-07-18", Usage(input=1200, output=300, cache_read=1000))
"""

from __future__ import annotations

import fnmatch
import functools
import os
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated

import msgspec

from gormes.providers.base import Usage
from gormes.errors import UserError

PRICING_ENV = "GORMES_PRICING"

NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class Price(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """US dollars per 1M tokens. Cached prompt tokens cost `cache_read`, else `input`."""

    input: NonNegative
    output: NonNegative
    cache_read: NonNegative | None = None


class PricingFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    models: dict[str, Price] = {}


class PricingError(UserError):
    """A pricing table that cannot be read or does not follow the format."""


class PricingTable:
    def __init__(self, prices: Mapping[str, Price]) -> None:
        self._exact = {name: price for name, price in prices.items() if "*" not in name}
        # Longest pattern first: the most specific pattern wins, whatever the file order.
        self._patterns = sorted(
            ((pattern, price) for pattern, price in prices.items() if "*" in pattern),
            key=lambda item: len(item[0]),
            reverse=True,
        )

    @classmethod
    def load(cls, path: str | Path) -> PricingTable:
        return cls(_read(Path(path)))

    def merged(self, other: PricingTable) -> PricingTable:
        """This table with `other`'s entries added, `other` winning where both price a name."""
        return PricingTable({**self._entries(), **other._entries()})

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

    def cost(self, model: str, usage: Usage) -> float | None:
        """US dollars for one turn's usage, or None when the model's price is unknown."""
        price = self.price(model)
        if price is None:
            return None
        cached = min(usage.cache_read, usage.input)
        cache_price = price.input if price.cache_read is None else price.cache_read
        dollars = (usage.input - cached) * price.input + cached * cache_price + usage.output * price.output
        return dollars / 1_000_000


def _read(path: Path) -> dict[str, Price]:
    try:
        with path.open("rb") as file:
            data = tomllib.load(file)
    except FileNotFoundError:
        raise PricingError(f"pricing table {path}: no such file") from None
    except OSError as exc:
        raise PricingError(f"pricing table {path}: cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PricingError(f"pricing table {path}: not valid TOML: {exc}") from None
    try:
        return msgspec.convert(data, PricingFile).models
    except msgspec.ValidationError as exc:
        raise PricingError(f"pricing table {path}: {' '.join(str(exc).split())}") from None


@functools.cache
def shipped_table() -> PricingTable:
    with resources.as_file(resources.files("gormes") / "data" / "pricing.toml") as path:
        return PricingTable.load(path)


def default_table(env: Mapping[str, str] | None = None) -> PricingTable:
    """The shipped table, extended by the file `GORMES_PRICING` names (read on each call)."""
    env = os.environ if env is None else env
    override = env.get(PRICING_ENV)
    if not override:
        return shipped_table()
    return shipped_table().merged(PricingTable.load(override))


def cost(model: str, usage: Usage, table: PricingTable | None = None) -> float | None:
    """US dollars for `usage` on `model`, or None when the price is unknown."""
    return (table or default_table()).cost(model, usage)


def format_cost(dollars: float | None) -> str:
    if dollars is None:
        return "unknown price"
    if dollars == 0:
        return "$0"
    return f"${dollars:.4f}" if dollars >= 0.0001 else f"${dollars:.2g}"
