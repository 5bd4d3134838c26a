"""Cron schedules as pure rules: parse an expression, find fire times, evolve a
schedule's state, decide commands. No clock, no I/O: every time is given.

Expressions are five-field cron (minute hour day-of-month month day-of-week),
evaluated in UTC by `cronsim`, plus the usual `@hourly`, `@daily`, `@weekly`,
`@monthly`, `@yearly` (`@annually`) and `@midnight` shorthands.

Missed fires: a schedule fires at most once per decision, for the most recent
fire time that is due and not yet fired. A daemon that was down across several
fire times fires once, for the latest of them, not once per missed time. Fire
times that fell due while a schedule was paused are skipped, as are those before
it was added.

The cron actor made of them is `actor.py` (`CRON`); the scheduler that acts on
them, `scheduler.py`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import msgspec
from cronsim import CronSim, CronSimError

from gormes.errors import UserError
from gormes.events.base import Event
from gormes.events.cron import (
    CronFired,
    CronPaused,
    CronRemoved,
    CronResumed,
    CronScheduled,
)

ScheduleStatus = Literal["active", "paused", "removed"]

SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class InvalidSchedule(UserError):
    """A cron expression, schedule name or job that cannot be scheduled."""


class ScheduleExists(UserError):
    """`cron add` of a name that is already scheduled."""


class ScheduleNotFound(UserError):
    """No schedule by that name (never added, or removed): not found, exit 2."""


# -- expressions and fire times -------------------------------------------------


def parse_expression(expr: str) -> str:
    """The expression in five-field form; raises `InvalidSchedule` naming the fault."""
    text = " ".join(expr.split())
    text = SHORTHANDS.get(text.lower(), text)
    if len(text.split(" ")) != 5:
        raise InvalidSchedule(
            f"bad schedule {expr!r}: want five fields (minute hour day month weekday) or @daily and the like"
        )
    try:
        CronSim(text, _utc(0))
    except CronSimError as exc:
        raise InvalidSchedule(f"bad schedule {expr!r}: {exc}") from None
    return text


def validate_name(name: str) -> str:
    if not _NAME.match(name):
        raise InvalidSchedule(
            f"bad schedule name {name!r}: letters, digits, '_', '.', '-' (starting with a letter or digit)"
        )
    return name


def next_fire(expr: str, after_ms: int) -> int:
    """The first fire time strictly after `after_ms`."""
    return _ms(next(CronSim(expr, _utc(after_ms))))


def latest_fire(expr: str, at_ms: int) -> int | None:
    """The last fire time at or before `at_ms` (None if there is none)."""
    # cronsim's reverse iteration is strictly before its start: start 1 ms later.
    try:
        return _ms(next(CronSim(expr, _utc(at_ms + 1), reverse=True)))
    except StopIteration:
        return None


def fire_key(name: str, fire_at: int) -> str:
    """The job idempotency key of one fire: schedule name + fire time."""
    stamp = _utc(fire_at).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"cron:{name}:{stamp}"


def _utc(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def _ms(dt: datetime) -> int:
    return int((dt - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1))


# -- a schedule's state ------------------------------------------------------------


class ScheduleState(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    schedule: str
    job: str
    data: Any = None
    queue: str = "default"
    status: ScheduleStatus = "active"
    created_at: int
    counts_from: int  # fire times at or before this are never fired
    last_fire_at: int | None = None
    last_job_id: str | None = None
    fires: int = 0
    version: int = 0  # events on the stream so far

    @property
    def live(self) -> bool:
        return self.status != "removed"


def evolve(state: ScheduleState | None, event: Any) -> ScheduleState | None:
    if isinstance(event, CronScheduled):
        # Also when added again after a removal: a fresh schedule, which can only
        # fire after `at`, so the old fires cannot come back.
        return ScheduleState(
            name=event.name, schedule=event.schedule, job=event.job, data=event.data,
            queue=event.queue, created_at=event.at, counts_from=event.at,
        )
    if state is None:
        return None
    if isinstance(event, CronPaused):
        return msgspec.structs.replace(state, status="paused")
    if isinstance(event, CronResumed):
        return msgspec.structs.replace(state, status="active", counts_from=event.at)
    if isinstance(event, CronRemoved):
        return msgspec.structs.replace(state, status="removed")
    if isinstance(event, CronFired):
        return msgspec.structs.replace(
            state, last_fire_at=event.fire_at, last_job_id=event.job_id, fires=state.fires + 1
        )
    return state


def due_fire(state: ScheduleState | None, now_ms: int) -> int | None:
    """The fire time to enqueue now, if any: the most recent one due and not fired."""
    if state is None or state.status != "active":
        return None
    latest = latest_fire(state.schedule, now_ms)
    floor = max(state.counts_from, state.last_fire_at if state.last_fire_at is not None else -1)
    if latest is None or latest <= floor:
        return None
    return latest


def next_due(state: ScheduleState | None, now_ms: int) -> int | None:
    """When this schedule next wants a decision (None: paused, removed, unknown)."""
    if state is None or state.status != "active":
        return None
    if due_fire(state, now_ms) is not None:
        return now_ms
    return next_fire(state.schedule, max(now_ms, state.counts_from))


# -- commands --------------------------------------------------------------------------


class Add(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    schedule: str
    job: str
    data: Any = None
    queue: str = "default"
    at: int


class Pause(msgspec.Struct, frozen=True):
    name: str
    at: int


class Resume(msgspec.Struct, frozen=True):
    name: str
    at: int


class Remove(msgspec.Struct, frozen=True):
    name: str
    at: int


class Fire(msgspec.Struct, frozen=True, kw_only=True):
    fire_at: int
    job_id: str
    coalesced: bool = False
    scheduler: str = ""
    at: int


Command = Add | Pause | Resume | Remove | Fire


def decide(state: ScheduleState | None, command: Command) -> list[Event]:
    """The events a command makes; [] when there is nothing to do (pausing a paused
    schedule, a fire already decided). Raises a `UserError` for impossible commands."""
    if isinstance(command, Add):
        if state is not None and state.live:
            raise ScheduleExists(f"schedule {command.name!r} already exists (remove it first)")
        validate_name(command.name)
        if not command.job.strip():
            raise InvalidSchedule("a schedule needs a job name")
        return [CronScheduled(
            name=command.name, schedule=parse_expression(command.schedule), job=command.job,
            data=command.data, queue=command.queue, at=command.at,
        )]
    if isinstance(command, Fire):
        # Only the most recent due fire as of `at`: older missed ones are skipped.
        if state is None or due_fire(state, command.at) != command.fire_at:
            return []
        return [CronFired(
            fire_at=command.fire_at, job_id=command.job_id, coalesced=command.coalesced,
            scheduler=command.scheduler, at=command.at,
        )]
    if state is None or not state.live:
        raise ScheduleNotFound(f"no schedule named {command.name!r}")
    if isinstance(command, Pause):
        return [] if state.status == "paused" else [CronPaused(at=command.at)]
    if isinstance(command, Resume):
        return [] if state.status == "active" else [CronResumed(at=command.at)]
    return [CronRemoved(at=command.at)]
