"""Skills check: what `gormes skills check` would say, run in this process.

The skills directory is the one runs read (`skillbook.skills_dir`):
$GORMES_SKILLS_DIR, else `skills/` in the working directory. Unlike `gormes skills
check` with no options, it never falls back to the shipped skills, which no run
sees. The routing evals (conflict probes): $GORMES_SKILL_EVALS_DIR, else
`evals/skills/` when it exists.
No skills directory is not a fault (a deployment may ship none). Evidence dates
are judged against the doctor's clock.

Without the skills runtime (gormes.skillbook) the check says "not installed"
(ok), unless the log holds skill events this gormes cannot look after (warn).
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from gormes.health import Check, DoctorContext, Verdict, count_events, fail, ok, warn

MODULE = "gormes.skillbook"


def not_installed(ctx: DoctorContext) -> Verdict | None:
    """The verdict when the skills runtime is not installed; None when it is."""
    if ctx.module_exists(MODULE):
        return None
    events = count_events(ctx.db, "skill*.*")
    if events:
        return warn(f"the log holds {events} skill event(s) but this gormes has no skills support",
                    "upgrade gormes to the version that wrote them")
    return ok("skills are not installed in this version (no skills module, no skill events)")


def probes() -> list[str]:
    """The routing eval phrases `gormes skills check` also uses as conflict probes."""
    # Imported on use, as in check_skills: a gormes without the skills module still runs.
    from gormes.skillbook import DEFAULT_EVALS_DIR, EVALS_DIR_ENV
    from gormes.skillbook.evals import load_cases

    configured = os.environ.get(EVALS_DIR_ENV)
    evals = Path(configured or DEFAULT_EVALS_DIR)
    return [c.phrase for c in load_cases(evals)] if configured or evals.is_dir() else []


def check_skills(ctx: DoctorContext) -> Verdict:
    if (absent := not_installed(ctx)) is not None:
        return absent
    # Imported once the module is known to be there: a gormes without it still checks the rest.
    from gormes.errors import UserError
    from gormes.skillbook import skills_dir
    from gormes.skillbook.loader import load_skills
    from gormes.skillbook.validator import check

    root = skills_dir()
    if not root.is_dir():
        return ok(f"no skills directory at {root} (set GORMES_SKILLS_DIR to check one elsewhere)")
    loaded = load_skills(root)
    try:
        phrases = probes()
    except UserError as exc:
        return fail(f"the routing evals cannot be read: {exc}", "fix the eval file, then `gormes skills check`")
    today = datetime.datetime.fromtimestamp(ctx.now, tz=datetime.UTC).date()
    report = check(loaded.skills, loaded.issues, probes=phrases, today=today)
    if report.errors:
        return fail(
            f"{len(report.errors)} skill error(s) in {root}, the first: {report.errors[0].line()}",
            "run `gormes skills check` for every error, fix the SKILL.md files, and check again",
        )
    warnings = len(report.issues) - len(report.errors)
    return ok(f"{len(report.skills)} skill(s) in {root} pass `gormes skills check`"
              + (f" ({warnings} warning(s))" if warnings else ""))


CHECKS = [Check(name="skills.check", category="skills", run=check_skills)]
