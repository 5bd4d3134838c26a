"""`gormes recall QUERY`: what memory holds about a query, with scores and reasons.

It runs the `memory.recall` operation as the operator through the audited door
(gormes/cli/ops.py; audited like any call), which brings the memory projection up
to date first.
"""

from __future__ import annotations

from typing import Any

import click

from gormes.printable import printable
from gormes.recall.api import DEFAULT_K, DEFAULT_SCOPE, MAX_K, MODES, check_request

SCOPE_ENV = "GORMES_SCOPE"


@click.command()
@click.argument("query")
@click.option("--mode", type=click.Choice(MODES), default="fused", show_default=True, help="How to rank.")
@click.option("--k", type=click.IntRange(1, MAX_K), default=DEFAULT_K, show_default=True, help="How many results.")
@click.option("--scope", envvar=SCOPE_ENV, default=DEFAULT_SCOPE, show_default=True, metavar="SCOPE",
              help="chat:<id> or project:<id> to recall in (env GORMES_SCOPE).")
@click.option("--cross-scope", is_flag=True, help="Recall across every scope (trusted and promoted items of others).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.pass_obj
def recall(obj: Any, query: str, mode: str, k: int, scope: str, cross_scope: bool, as_json: bool) -> None:
    """Recall memory for QUERY: facts and relationships, each with its score per mode and why."""
    import msgspec

    from gormes.cli.ops import operator_call

    # The operation checks the request too; checked here first, a bad one (an empty
    # query: what the input type's own check would name less plainly) opens nothing.
    check_request(query, mode=mode, k=k, scope=scope, cross_scope=cross_scope, trust="operator")
    args = {"query": query, "mode": mode, "k": k, "scope": scope, "cross_scope": cross_scope}
    result = operator_call(obj, "memory.recall", args, jobs=False, create=False)
    if as_json:
        click.echo(msgspec.json.encode(result).decode())
        return
    print_result(result)


def print_result(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(soft_wrap=True)
    for note in result.notes:
        console.print(Text(printable(f"note: {note}")))
    if not result.hits:
        console.print(Text(printable(f"nothing recalled for {result.query!r} in {', '.join(result.scopes)}")))
        return
    table = Table(show_edge=False, header_style="bold")
    for column in ("#", "score", "kind", "text", "scope", "modes", "why"):
        table.add_column(column, overflow="fold")
    for rank, hit in enumerate(result.hits, start=1):
        modes = " ".join(
            f"{m[0]}#{s.rank}" for m in ("lexical", "graph", "semantic") if (s := getattr(hit.scores, m)) is not None
        )
        text = hit.text + (" (unreviewed)" if hit.review_state == "unreviewed" else "") + (" (stale)" if hit.stale else "")
        cells = (str(rank), score_text(hit.score), hit.kind, text, hit.scope, modes,
                 "; ".join(w.reason for w in hit.why))
        table.add_row(*(Text(printable(cell)) for cell in cells))
    console.print(table)


def score_text(score: float) -> str:
    """Four significant digits: a bm25 score (about 1e-6 on a small log) reads as
    `1.234e-06`, not as `0.0000` like every other hit."""
    return f"{score:.4g}"
