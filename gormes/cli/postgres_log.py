"""The log commands (`events`, `tail`, `append`) on a PostgreSQL database.

`--db` (or GORMES_DB) holding a `postgresql://` URL routes those commands here;
they open the store with `gormes.events.open.open_store` and print exactly what
they print for an SQLite file.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from gormes.events.open import is_postgres_url

PAGE = 2000


def database_url() -> str | None:
    """The --db / GORMES_DB value when it is a PostgreSQL URL."""
    ctx = click.get_current_context(silent=True)
    url = getattr(ctx.find_root().obj, "url", None) if ctx is not None else None
    return url if is_postgres_url(url) else None


def read_pages(
    url: str,
    after: int,
    *,
    types: Sequence[str] = (),
    streams: Sequence[str] = (),
    limit: int | None = None,
) -> list[list]:
    """Pages of stored events (data kept as stored text), as of the head when read."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import trio

    from gormes.events.jsonl import STORED_JSON
    from gormes.events.open import open_store

    async def read() -> list[list]:
        pages = []
        async with open_store(url, readonly=True, codec=STORED_JSON) as store:
            upto = await store.head()
            position, remaining = after, limit
            while remaining is None or remaining > 0:
                size = PAGE if remaining is None else min(PAGE, remaining)
                page = await store.read_with(
                    lambda log, p=position, n=size: log.read_all(
                        p, n, list(types) or None, streams=list(streams) or None, upto=upto
                    )
                )
                if not page:
                    break
                pages.append(page)
                position = page[-1].position
                if remaining is not None:
                    remaining -= len(page)
        return pages

    return trio.run(read)
