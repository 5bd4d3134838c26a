"""Option types shared by the commands.

A position, a count or a version is a 64-bit signed integer in both stores, so
the CLI takes 0..2**63-1 and refuses the rest in click's usual one line rather
than letting SQLite raise OverflowError."""

from __future__ import annotations

import click

INT64_MAX = 2**63 - 1

# --after, --limit, --expected-version: where SQLite and PostgreSQL store a BIGINT.
POSITION = click.IntRange(min=0, max=INT64_MAX)
