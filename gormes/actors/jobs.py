"""The job actor's pure rules: state, commands, decide and evolve.

No I/O, no clock, no randomness: the time (`now`, ms since the epoch) and any
random draw (backoff jitter) arrive on the command. NOT BUILT YET beyond the
error types; see gormes/actors/queue.py for the public API.
"""

from __future__ import annotations

from gormes.errors import GormesError, UserError


class JobError(GormesError):
    """Base of the job queue's errors."""


class InvalidJob(UserError, JobError):
    """A submit (or replay) that cannot be accepted: bad name, options or data."""


class JobNotFound(UserError, JobError):
    """No job with that id."""


class InvalidTransition(UserError, JobError):
    """The job is not in a state that allows the command (pause a completed job...)."""


class LockLost(JobError):
    """The lock token no longer holds the job: a stale holder changes nothing."""

    exit_code = 1
