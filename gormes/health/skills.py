"""Skills check. The skills runtime (`gormes skills check`) is not built in this
version. Its arrival, or skill events in the log, are reported as unchecked
rather than passed over.
"""

from __future__ import annotations

from gormes.health import Check, DoctorContext, Verdict, count_events, ok, warn

MODULES = ("gormes.skillbook", "gormes.events.skills")


def check_installed(ctx: DoctorContext) -> Verdict:
    present = [m for m in MODULES if ctx.module_exists(m)]
    events = count_events(ctx.db, "skill*.*")
    if present:
        return warn(
            f"skills are installed ({', '.join(present)}) but this doctor does not run "
            "`gormes skills check` yet",
            "run `gormes skills check` yourself; wire it into gormes/health/skills.py",
        )
    if events:
        return warn(
            f"the log holds {events} skill event(s) but this gormes has no skills support",
            "upgrade gormes to the version that wrote them",
        )
    return ok("skills are not installed in this version (no skills module, no skill events)")


CHECKS = [Check(name="skills.installed", category="skills", run=check_installed)]
