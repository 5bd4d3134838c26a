"""The cron actor: one schedule, stream `cron-<name>`, state `ScheduleState` (None
before `cron.scheduled`), with `evolve` and `decide` from gormes/actors/cron/rules.py.

Its commands are carried out by `CronBook` (the operator's) and `CronScheduler`
(a fire, with the job it submits) in gormes/actors/cron/scheduler.py, each in one
store transaction.
"""

from __future__ import annotations

from gormes.actors.actor import Behavior, struct_version
from gormes.actors.cron.rules import Command, ScheduleState, decide, evolve

CRON: Behavior[ScheduleState | None, Command] = Behavior(
    kind="cron", initial=None, evolve=evolve, decide=decide, with_version=struct_version,
)
