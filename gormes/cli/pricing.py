"""`--pricing FILE`: the one pricing option of every command that prints a cost.

`gormes jobs list --json`, `jobs get`, `jobs stats`, `runs list --json`, `runs show`
and `top` take it. The table is the one loader's (gormes/providers/pricing.py
`load_table`): the shipped prices extended by FILE, or without the option by the
file `GORMES_PRICING` names. A command reads it before it opens the database, and
only when it prints a cost, so a bad file is one `gormes: error:` line (exit 2)
with nothing opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from gormes.providers.pricing import PricingTable

pricing_option = click.option(
    "--pricing", metavar="FILE",
    help='A TOML pricing table ([models."NAME"] input, output, cache_read: US dollars per '
         "1M tokens) whose entries extend and override the shipped prices "
         "(default: the file env GORMES_PRICING names; docs/providers.md).",
)


def pricing_table(path: str | None) -> PricingTable:
    # lazy: the quick reads that print no cost need not import the providers
    from gormes.providers.pricing import load_table

    return load_table(path)
