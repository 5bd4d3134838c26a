"""The job actor: stream `job-<id>`, state `JobState` (None before `job.submitted`),
`evolve` from gormes/actors/jobs/state.py, `decide` from gormes/actors/jobs/rules.py.

Its commands are carried out by the job queue, each in one store transaction
(`JobSession`, gormes/actors/jobs/session.py, through gormes/actors/runtime.py).
"""

from __future__ import annotations

from gormes.actors.actor import Behavior, struct_version
from gormes.actors.jobs.rules import Command, decide
from gormes.actors.jobs.state import JobState, evolve

JOB: Behavior[JobState | None, Command] = Behavior(
    kind="job", initial=None, evolve=evolve, decide=decide, with_version=struct_version,
)
