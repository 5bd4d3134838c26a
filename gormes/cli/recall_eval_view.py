"""The people's view of `gormes eval recall`: one row per mode, then privacy
violations, then the queries each mode missed with why it chose what it did."""

from __future__ import annotations

from gormes.recall.evals import EvalReport, QueryOutcome

MISSES_SHOWN = 6


def mode_rows(report: EvalReport) -> list[list[str]]:
    rows = []
    for mode in report.modes:
        if not mode.enabled:
            rows.append([mode.mode, "off", "", "", "", "", "", "", str(mode.privacy_violations)])
            continue
        s = mode.scored
        rows.append([mode.mode, "on", str(s.queries), f"{s.precision:.3f}", f"{s.recall:.3f}", f"{s.mrr:.3f}",
                     f"{s.ndcg:.3f}", str(mode.stale_first), str(mode.privacy_violations)])
    return rows


def miss_lines(outcome: QueryOutcome) -> list[str]:
    rank = outcome.scores.first_relevant_rank if outcome.scores else None
    where = f"first relevant at rank {rank}" if rank else "no relevant hit"
    lines = [f"  {outcome.fixture}/{outcome.query} ({outcome.text!r}): {where}"]
    if outcome.hits:
        top = outcome.hits[0]
        lines.append(f"    top: {top.key or top.id} {top.text!r}" + (" [stale]" if top.stale else ""))
        lines.extend(f"      why {reason}" for reason in top.why)
    return lines


def print_recall_report(report: EvalReport) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    k = report.k
    console.print(f"recall evals: {report.queries} queries in {len(report.fixtures)} fixtures "
                  f"({', '.join(report.fixtures)}), k={k}")
    table = Table(show_edge=False, header_style="bold")
    for column in ("mode", "state", "scored", f"P@{k}", f"R@{k}", "MRR", f"nDCG@{k}", "stale first", "privacy"):
        table.add_column(column, justify="left" if column in ("mode", "state") else "right")
    for row in mode_rows(report):
        table.add_row(*map(Text, row))
    console.print(table)
    for mode in report.modes:
        if not mode.enabled:
            console.print(Text(f"{mode.mode}: off: {mode.reason}"), style="yellow")
    console.print(f"privacy violations: {len(report.privacy_violations)}",
                  style="bold red" if report.privacy_violations else "green")
    for violation in report.privacy_violations:
        console.print(Text(f"  {violation.mode} {violation.fixture}/{violation.query}: {violation.hit or '-'} "
                           f"({violation.scope or '-'}): {violation.reason}"))
    for mode in report.modes:
        if not mode.enabled:
            continue
        misses = [o for o in report.outcomes
                  if o.mode == mode.mode and o.scores is not None and o.scores.reciprocal_rank < 1.0]
        if not misses:
            continue
        console.print(f"{mode.mode}: {len(misses)} queries without a relevant hit first")
        for outcome in misses[:MISSES_SHOWN]:
            for line in miss_lines(outcome):
                console.print(Text(line))
        if len(misses) > MISSES_SHOWN:
            console.print(f"  ... and {len(misses) - MISSES_SHOWN} more (every query and hit: --json)", style="dim")
