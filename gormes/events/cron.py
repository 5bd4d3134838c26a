"""Cron events: a schedule's whole life on its own stream `cron-<name>`.

A schedule is added, paused, resumed and removed by the operator; the scheduler
records each fire as `cron.fired`, in the same transaction that submits the job,
so a fire time is decided once for every scheduler on the database. Times are
integer milliseconds since the epoch, chosen by the caller.
"""

from __future__ import annotations

from typing import Any

from gormes.events.base import Event

CRON_STREAM_PREFIX = "cron-"


def cron_stream(name: str) -> str:
    return CRON_STREAM_PREFIX + name


class CronScheduled(Event, tag="cron.scheduled", kw_only=True):
    """A schedule was added (or added again after a removal)."""

    name: str
    schedule: str  # a five-field cron expression, UTC
    job: str  # the job handler's name
    data: Any = None
    queue: str = "default"
    at: int


class CronPaused(Event, tag="cron.paused", kw_only=True):
    at: int


class CronResumed(Event, tag="cron.resumed", kw_only=True):
    """Fires that fell due while paused are skipped: counting starts again at `at`."""

    at: int


class CronRemoved(Event, tag="cron.removed", kw_only=True):
    at: int


class CronFired(Event, tag="cron.fired", kw_only=True):
    """The schedule's fire at `fire_at` submitted job `job_id` (or found it already
    held by the idempotency key: `coalesced`), with trust class `trust`."""

    fire_at: int
    job_id: str
    coalesced: bool = False
    trust: str = "system"
    scheduler: str = ""
    at: int


CronEvent = CronScheduled | CronPaused | CronResumed | CronRemoved | CronFired
