"""Memory check. The memory graph and semantic recall are not built in this
version, so there is nothing of them to measure. What can still be wrong is a log
holding memory events this gormes cannot look after (written by a newer one): that
is reported, never hidden behind an "ok".
"""

from __future__ import annotations

from gormes.health import Check, DoctorContext, Verdict, count_events, ok, warn

MODULES = ("gormes.recall", "gormes.events.memory", "gormes.projections.memory")


def check_installed(ctx: DoctorContext) -> Verdict:
    present = [m for m in MODULES if ctx.module_exists(m)]
    events = count_events(ctx.db, "memory.*")
    if present:
        return warn(
            f"memory modules are installed ({', '.join(present)}) but this doctor has no "
            "memory checks yet: semantic recall, extractor backlog and graph age go unchecked",
            "add the memory checks to gormes/health/memory.py",
        )
    if events:
        return warn(
            f"the log holds {events} memory event(s) but this gormes has no memory support",
            "upgrade gormes to the version that wrote them",
        )
    return ok("memory is not installed in this version (no memory module, no memory events)")


CHECKS = [Check(name="memory.installed", category="memory", run=check_installed)]
