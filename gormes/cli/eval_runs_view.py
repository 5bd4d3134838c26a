"""`gormes eval runs`'s text report: a block per run, what changed, then totals."""

from __future__ import annotations

from typing import Any

import click
import msgspec

from gormes.actors.runs.evaluate import EvalReport, RunSide
from gormes.providers.pricing import format_cost


def _short(value: Any, width: int = 70) -> str:
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _answer(side: RunSide) -> str:
    return _short(side.answer) if side.status == "completed" else f"({side.status}: {_short(side.error or '')})"


def _tools(side: RunSide) -> str:
    return ", ".join(side.tools) or "none"


def _tokens(side: RunSide) -> str:
    return f"in {side.tokens.input} out {side.tokens.output}"


def print_eval_report(report: EvalReport) -> None:
    how = [f"model {report.model}"] if report.model else []
    how += [f"{key}={_short(value, 40)}" for key, value in report.overrides.items()]
    click.echo(f"eval of {len(report.runs)} run(s) re-run with {', '.join(how)}")
    for e in report.runs:
        o, r = e.original, e.rerun
        if r is None:
            click.echo(f"run {e.run_id}: not re-run: {e.error}")
            continue
        click.echo(f"run {e.run_id} -> {r.run_id}: {o.status} -> {r.status}")
        click.echo(f"  answer: {_answer(o)} -> {_answer(r)}" if e.answer_changed else f"  answer: same ({_answer(o)})")
        click.echo(f"  tools:  {_tools(o)} -> {_tools(r)}" if e.tools_changed else f"  tools:  same ({_tools(o)})")
        click.echo(f"  tokens: {_tokens(o)} -> {_tokens(r)}")
        click.echo(f"  cost:   {format_cost(o.cost)} -> {format_cost(r.cost)}")
    click.echo(f"{report.changed} of {len(report.runs)} changed; {report.failed} not re-run")
