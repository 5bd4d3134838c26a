"""`gormes eval skills [--json]`: routing accuracy on the eval phrases, and the
confusion pairs. Exit 1 below 100% (the CI gate). `gormes eval recall`: recall
quality on fixtures. `gormes eval runs RUN... | --handler/--status/--since --model
SPEC [--prompt FILE] [--set K=V]... [--yes] [--json]`: recorded runs re-run as forks
from their start, and what changed (gormes/actors/runs/evaluate.py)."""

from __future__ import annotations

import sys
from typing import Any

import click
import msgspec

from gormes.cli.foreground import (
    import_option,
    mcp_config_option,
    model_retries_option,
    model_timeout_option,
    workspace_option,
)
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


@eval_.command("runs")
@click.argument("run_ids", nargs=-1, metavar="[RUN]...")
@click.option("--handler", metavar="NAME", help="Filter: runs of this handler (without RUN ids).")
@click.option("--status", type=click.Choice(["completed", "failed", "cancelled"]),
              help="Filter: runs that ended so.")
@click.option("--since", metavar="T", help="Filter: runs started from this time on (ISO-8601, or an age: 30m, 2h, 7d).")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="Filter: at most this many runs, newest first.")
@click.option("--model", metavar="SPEC", help="Re-run on this model: scripted:PATH, openai:MODEL or anthropic:MODEL.")
@click.option("--prompt", "prompt_path", type=click.Path(dir_okay=False, exists=True), metavar="FILE",
              help="Re-run with this prompt (the input's `prompt` key, from the file's text).")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Override a key of each run's input (VALUE as JSON, else text); repeatable.")
@click.option("--yes", is_flag=True, help="Re-run even if the runs may call mutating, non-idempotent operations "
              "(without it they are listed and nothing is re-run).")
@click.option("--pricing", "pricing_path", metavar="FILE", help="A pricing table (TOML) extending the shipped one.")
@workspace_option
@import_option
@mcp_config_option
@model_timeout_option
@model_retries_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
def runs(obj: Any, run_ids: tuple[str, ...], handler: str | None, status: str | None, since: str | None,
         limit: int, model: str | None, prompt_path: str | None, settings: tuple[str, ...], yes: bool,
         pricing_path: str | None, workspace: str | None, imports: tuple[str, ...], mcp_config: str | None,
         model_timeout: float | None, model_retries: int | None, as_json: bool) -> int:
    """Re-run recorded runs (RUN ids, or a filter) as forks from their start on
    another model or prompt, and report per run what changed: status and final
    answer, tools called, tokens and cost.

    Each re-run is a fork (operation run.fork, audited) at the run's start: nothing
    is copied, the whole run is made again live. Exit 0 when every run was re-run,
    1 when one could not be (its refusal is in the report)."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import time
    from pathlib import Path

    from gormes.actors.runs.evaluate import EvalRefused, check_reruns, eval_risks, eval_runs, eval_sources
    from gormes.audit_export import parse_time
    from gormes.cli.eval_runs_view import print_eval_report
    from gormes.cli.foreground import drive_runs, start_and_wait
    from gormes.cli.fork import echo_unconfirmed, parse_setting
    from gormes.events.catalog import load_all
    from gormes.events.open import require_database
    from gormes.errors import UserError
    from gormes.actors.runs.fork_replace import ForkUnconfirmed
    from gormes.providers.pricing import load_table
    from gormes.tools.imports import load_imports
    from gormes.tools.run_admin import RunForkInput

    if run_ids and (handler or status or since):
        raise EvalRefused("give RUN ids or a filter (--handler, --status, --since), not both")
    overrides = dict(map(parse_setting, settings))
    if prompt_path is not None:
        overrides["prompt"] = Path(prompt_path).read_text().removesuffix("\n")
    if model is None and not overrides:
        raise EvalRefused("give --model, --prompt or --set: what the runs are re-run with")
    since_s = parse_time(since, time.time()) if since is not None else None
    table = load_table(pricing_path)
    load_all()
    load_imports(imports)
    target = obj.target
    require_database(target)

    async def evaluate(door: Any) -> Any:
        try:
            sources = await eval_sources(door.store, run_ids=run_ids, handler=handler, status=status,
                                         since=since_s, limit=limit)
            check_reruns(sources, door.executor.runs.manager, model, overrides)
            risks = eval_risks(sources, door.executor.registry)
            if risks and not yes:
                raise ForkUnconfirmed(risks)
        except UserError as exc:  # the re-runs are forks: refused before any, audited as one
            asked = {"run_ids": list(run_ids), "handler": handler, "status": status, "since": since,
                     "model": model, "overrides": overrides}
            await door.refuse("run.fork", asked, exc)
            raise

        async def fork(run_id: str, at: int) -> Any:
            value = RunForkInput(run_id=run_id, at=at, model=model, overrides=overrides, yes=True)
            return await start_and_wait(door, "run.fork", value)

        return await eval_runs(door.store, sources, fork, table, model=model, overrides=overrides)

    try:
        report, signals = drive_runs(target, workspace, evaluate, mcp_config=mcp_config,
                                     model_timeout=model_timeout, model_retries=model_retries)
    except (ForkUnconfirmed, BaseExceptionGroup) as exc:
        from gormes.cli.fork import unconfirmed_in

        unconfirmed = unconfirmed_in(exc)
        if unconfirmed is None:
            raise
        return echo_unconfirmed(unconfirmed, as_json, what="re-run")
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
    else:
        print_eval_report(report)
    if signals:
        return 128 + signals[0]
    return 1 if report.failed else 0
