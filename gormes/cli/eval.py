"""`gormes eval skills [--json]`: routing accuracy on the eval phrases, and the
confusion pairs. Exit 1 below 100% (the CI gate)."""

from __future__ import annotations

import sys
from typing import Any

import click
import msgspec

from gormes.skillbook import (
    EVALS_DIR_ENV,
    SKILLS_DIR_ENV,
    operator_evals_dir,
    operator_skills_dir,
)


@click.group("eval")
def eval_() -> None:
    """Run evals."""


@eval_.command("skills")
@click.option("--skills-dir", "skills_path", envvar=SKILLS_DIR_ENV, metavar="DIR",
              help="Directory of NAME/SKILL.md folders (default ./skills, else the shipped skills).")
@click.option("--evals-dir", "evals_path", envvar=EVALS_DIR_ENV, metavar="DIR",
              help="Routing eval files (*.yaml, *.jsonl) (default ./evals/skills, else the shipped evals "
              "with the shipped skills).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def skills(skills_path: str | None, evals_path: str | None, as_json: bool) -> None:
    """Route every eval phrase and report accuracy and confusion pairs; exit 1 below 100%."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.cli.skills import load_strict
    from gormes.skillbook.errors import EvalFileError
    from gormes.skillbook.evals import load_cases, run_evals

    root = operator_skills_dir(skills_path)
    loaded = load_strict(skills_path)
    evals = operator_evals_dir(evals_path, root)
    cases = load_cases(evals)
    if not cases:
        raise EvalFileError(f"{evals}: no routing eval cases found")
    report = run_evals(loaded, cases)
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
    else:
        click.echo(f"routing accuracy: {report.accuracy:.1%} ({report.correct}/{report.total}) on {root}")
        for failure in report.failures:
            click.echo(f"  wrong: {failure.phrase!r}: expected {failure.expected}, got {failure.got} ({failure.why})")
        for pair in report.confusion:
            click.echo(f"  confusion: {pair.expected} -> {pair.got} x{pair.count}")
    if report.correct != report.total:
        sys.exit(1)


@eval_.command("recall")
@click.option("--fixtures", "fixtures_path", metavar="DIR",
              help="Recall fixtures (*.yaml, *.jsonl), or one fixture file "
              "(default ./evals/recall, else the fixtures shipped with gormes).")
@click.option("--modes", default="lexical,graph,semantic,fused", show_default=True,
              help="Comma-separated recall modes to score.")
@click.option("--k", "k", type=click.IntRange(1, 100), default=5, show_default=True, help="Score the top k hits.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole report (every query, every hit) as JSON.")
@click.pass_obj
def recall(obj: Any, fixtures_path: str | None, modes: str, k: int, as_json: bool) -> None:
    """Seed each fixture into a scratch database, run its queries in each mode and
    report precision@k, recall@k, MRR and nDCG@k; exit 1 on any privacy violation.

    The scratch database is a temp SQLite file; with `--db postgresql://...`, a
    scratch schema in that PostgreSQL database (dropped afterwards)."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import trio

    from gormes.events.catalog import load_all
    from gormes.recall.api import MODES, RecallError
    from gormes.recall.eval_fixtures import fixtures_dir, load_fixtures
    from gormes.recall.evals import run_recall_evals

    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in MODES]
    if not chosen or unknown:
        raise RecallError(f"unknown recall mode {', '.join(unknown) or '(none given)'} (known: {', '.join(MODES)})")
    load_all()
    fixtures = load_fixtures(fixtures_dir(fixtures_path))
    url = getattr(obj, "url", None)
    report = trio.run(lambda: run_recall_evals(fixtures, modes=list(dict.fromkeys(chosen)), k=k, postgres_url=url))
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
    else:
        from gormes.cli.recall_eval_view import print_recall_report

        print_recall_report(report)
    if report.privacy_violations:
        sys.exit(1)
