"""`gormes skills check|list|route|promote|feedback|usage`.

Skills are read from --skills-dir (env GORMES_SKILLS_DIR, default ./skills, else
the skills shipped with gormes); routing evals, used by `check` as conflict probes,
from --evals-dir (env GORMES_SKILL_EVALS_DIR, default ./evals/skills, else the
shipped evals beside the shipped skills, skipped when neither is there). `promote`
rewrites files, so it reads ./skills (or the given directory), never the shipped copy.

What records or rewrites (`promote`, `feedback`, `route --run`) runs the
operator-only skills.* operations through the audited executor
(gormes/tools/skills_admin.py; decision 0019); `promote` and `feedback` are each
one operation, their options derived from its input (gormes/cli/derive.py).
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

import click
import msgspec
import trio

from gormes.cli.derive import OperatorCall, Shown, operation_command, spec_named
from gormes.skillbook import (
    EVALS_DIR_ENV,
    SKILLS_DIR_ENV,
    operator_evals_dir,
    operator_skills_dir,
    skills_dir,
)
from gormes.events.open import open_store
from gormes.skillbook.evals import load_cases
from gormes.skillbook.loader import load_skills
from gormes.skillbook.resolver import route
from gormes.skillbook.usage import read_usage
from gormes.skillbook.validator import check as run_check
from gormes.tools import skills_admin

skills_dir_option = click.option(
    "--skills-dir", "skills_path", envvar=SKILLS_DIR_ENV, metavar="DIR",
    help="Directory of NAME/SKILL.md folders (env GORMES_SKILLS_DIR; default ./skills, else the shipped skills).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


def _echo_json(value: Any) -> None:
    click.echo(msgspec.json.encode(value).decode())


def load_strict(path: str | None) -> list:
    """Every skill, or one clear error naming the first file that did not load."""
    return skills_admin.load_strict(operator_skills_dir(path))


@click.group()
def skills() -> None:
    """Check, list, route and promote the SKILL.md skills."""


@skills.command()
@skills_dir_option
@click.option("--evals-dir", "evals_path", envvar=EVALS_DIR_ENV, metavar="DIR",
              help="Routing evals whose phrases are also conflict probes (default ./evals/skills, "
              "else the shipped evals with the shipped skills).")
@json_option
def check(skills_path: str | None, evals_path: str | None, as_json: bool) -> None:
    """Validate every skill; exit 1 if any rule is broken."""
    root = operator_skills_dir(skills_path)
    loaded = load_skills(root)
    evals = operator_evals_dir(evals_path, root)
    probes = [c.phrase for c in load_cases(evals)] if evals_path or evals.is_dir() else []
    report = run_check(loaded.skills, loaded.issues, probes=probes, today=datetime.date.today())
    if as_json:
        _echo_json({"ok": report.ok, "skills": report.skills, "issues": report.issues})
    else:
        for issue in report.issues:
            click.echo(f"{issue.severity}: {issue.line()}")
        errors = len(report.errors)
        verdict = "ok" if report.ok else "FAILED"
        count = len(report.skills)
        click.echo(f"{verdict}: {count} skill{'s' if count != 1 else ''}, {errors} error{'s' if errors != 1 else ''}")
    if not report.ok:
        sys.exit(1)


@skills.command("list")
@skills_dir_option
@json_option
def list_(skills_path: str | None, as_json: bool) -> None:
    """List every skill with its status (disabled ones included: this is the operator's view)."""
    loaded = load_strict(skills_path)
    rows = [
        {"name": s.name, "status": s.status, "description": s.meta.description,
         "triggers": s.triggers, "required_skills": s.meta.required_skills,
         "evidence": len(s.meta.evidence), "file": s.file}
        for s in sorted(loaded, key=lambda s: s.name)
    ]
    if as_json:
        _echo_json(rows)
        return
    from gormes.cli.output import print_rows_table

    print_rows_table(
        ("name", "status", "evidence", "description"),
        [(r["name"], r["status"], r["evidence"], r["description"]) for r in rows],
    )


@skills.command("route")
@click.argument("phrase")
@skills_dir_option
@click.option("--candidates", is_flag=True, help="Also route to candidate skills.")
@click.option("--run", "run_id", metavar="RUN_ID", help="Record the choice as a selection by this run.")
@json_option
@click.pass_obj
def route_(obj: Any, phrase: str, skills_path: str | None, candidates: bool, run_id: str | None, as_json: bool) -> None:
    """Which skill answers PHRASE, with scores and why."""
    positions: list[int] = []
    if run_id is None:
        result = route(load_strict(skills_path), phrase, include_candidates=candidates)
    else:
        from gormes.cli.ops import operator_call

        selected = operator_call(obj, "skills.select", {
            "run_id": run_id, "phrase": phrase, "include_candidates": candidates,
            "skills_dir": str(operator_skills_dir(skills_path)),
        })
        result, positions = selected.route, selected.positions
    if as_json:
        _echo_json({**msgspec.to_builtins(result), "selection_positions": positions})
        return
    if not result.chosen:
        click.echo("no skill answers this phrase" + ("" if candidates else " (candidates not included: --candidates)"))
    for match in result.chosen:
        click.echo(f"{match.skill}  score {match.score:g}  [{match.status}]  {match.why}")
    if result.ambiguous:
        click.echo("ambiguous: several skills tie at the top score")
    for match in result.others:
        click.echo(f"  also matched: {match.skill} (score {match.score:g}): {match.why}")
    for ruled in result.ruled_out:
        click.echo(f"  ruled out: {ruled.skill}: {ruled.why}")
    for position in positions:
        click.echo(f"recorded skill.selected at position {position} for run {run_id}")


# promote rewrites the skill, so it has no shipped copy to fall back on: ./skills by default.
SKILLS_DIR = Shown(metavar="DIR", envvar=SKILLS_DIR_ENV, help="Directory of NAME/SKILL.md folders; default ./skills.")


@operation_command(skills, "promote", spec_named(skills_admin.SPECS, "skills.promote"), arguments=("name",),
                   shown={"skills_dir": SKILLS_DIR})
@json_option
def promote(call: OperatorCall, as_json: bool) -> None:
    """Move NAME one status up, only if its evidence holds; records an event and rewrites its front matter."""
    result = call.run()
    if as_json:
        _echo_json(result)
        return
    click.echo(f"{result.skill}: {result.from_status} -> {result.to_status} ({result.file}; event at position {result.position})")


@operation_command(skills, "feedback", spec_named(skills_admin.SPECS, "skills.feedback"),
                   arguments=("run_id", "skill", "verdict"), shown={"skills_dir": SKILLS_DIR})
@json_option
def feedback(call: OperatorCall, as_json: bool) -> None:
    """Say how skill SKILL served run RUN_ID (good or bad)."""
    recorded = call.run()
    if as_json:
        _echo_json(recorded)
        return
    click.echo(f"recorded skill.feedback at position {recorded.position}")


@skills.command()
@click.option("--skill", "name", metavar="NAME", help="Only this skill's selections.")
@json_option
@click.pass_obj
def usage(obj: Any, name: str | None, as_json: bool) -> None:
    """Each selection of a skill with its run's outcome and feedback (the skill_usage projection)."""
    async def main() -> list:
        async with open_store(obj.target, create=False) as store:
            return await read_usage(store, name)

    rows = trio.run(main)
    if as_json:
        _echo_json(rows)
        return
    from gormes.cli.output import print_rows_table

    print_rows_table(
        ("position", "skill", "run", "score", "outcome", "feedback"),
        [(r.position, r.skill, r.run_id, f"{r.score:g}", r.outcome, r.feedback) for r in rows],
    )
