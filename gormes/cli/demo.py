"""`gormes demo`: the walk-through `make demo` runs."""

from __future__ import annotations

import click


@click.command()
@click.pass_obj
def demo(obj) -> None:
    """Actors append concurrently, a follower tails them, projections and jobs print.

    Writes to the database given by --db, which must hold no events yet (`make demo`
    uses a fresh .demo/gormes.db; an empty PostgreSQL schema works too).
    """
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import trio

    from gormes.demo import main

    trio.run(main, obj.target)
