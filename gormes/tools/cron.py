"""cron.add, cron.pause, cron.resume and cron.remove: the operator's schedules.

Operator-only and never offered to models. A schedule's jobs are submitted by
the daemon as trust class `system`, so whoever may add a schedule may start
`system` work: letting a gateway or a subagent add one would hand it a class
wider than its own. `gormes cron add|pause|resume|remove` call these, audited
like every other operation (decision 0019).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from gormes.actors.cron.rules import ScheduleState, next_due, parse_expression, validate_name
from gormes.actors.cron.scheduler import CronBook
from gormes.ops.spec import OperationContext, OperationSpec, OperationUnavailable
from gormes.tools.agent_job_data import AGENT_JOB, check_submission

OPERATOR = frozenset({"operator"})

ScheduleName = Annotated[str, msgspec.Meta(min_length=1, max_length=128, description="The schedule's name.")]


class Schedule(msgspec.Struct, kw_only=True):
    """A schedule as it stands after the call."""

    name: str
    schedule: str
    job: str
    data: Any = None
    queue: str
    status: str
    next_fire: int | None = None  # ms since the epoch; None when paused or removed
    fires: int = 0


class CronAddInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Add a schedule that submits job `job` on a five-field cron expression (UTC)."""

    name: ScheduleName
    schedule: Annotated[str, msgspec.Meta(
        min_length=1, max_length=200,
        description='Five fields, UTC: "*/15 * * * *"; or @hourly, @daily, @weekly, @monthly, @yearly.')]
    job: Annotated[str, msgspec.Meta(min_length=1, description="The job handler's name.")]
    data: Annotated[Any, msgspec.Meta(description="The data each job gets (JSON).")] = None
    queue: Annotated[str, msgspec.Meta(description="The queue its jobs go to.")] = "default"

    # Checked as the input is decoded, by every door and before anything is opened
    # (`gormes cron add` refuses a bad expression writing nothing); CronBook.add checks again.
    def __post_init__(self) -> None:
        validate_name(self.name)
        parse_expression(self.schedule)


class CronNameInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The schedule to act on."""

    name: ScheduleName


def _book(ctx: OperationContext) -> CronBook:
    if ctx.store is None:
        raise OperationUnavailable("the cron operations need an event store")
    return CronBook(ctx.store, clock=ctx.clock)


def _view(ctx: OperationContext, state: ScheduleState) -> Schedule:
    return Schedule(
        name=state.name, schedule=state.schedule, job=state.job, data=state.data, queue=state.queue,
        status=state.status, next_fire=next_due(state, int(ctx.clock() * 1000)), fires=state.fires,
    )


async def cron_add(ctx: OperationContext, value: CronAddInput) -> Schedule:
    if value.job == AGENT_JOB:  # its fires queue straight into the queue: checked once, here (0090)
        # Lazy: builtin lists this module's operations.
        from gormes.tools.builtin import default_registry

        check_submission(value.data, default_registry())
    return _view(ctx, await _book(ctx).add(value.name, value.schedule, value.job, value.data, value.queue))


async def cron_pause(ctx: OperationContext, value: CronNameInput) -> Schedule:
    return _view(ctx, await _book(ctx).pause(value.name))


async def cron_resume(ctx: OperationContext, value: CronNameInput) -> Schedule:
    return _view(ctx, await _book(ctx).resume(value.name))


async def cron_remove(ctx: OperationContext, value: CronNameInput) -> Schedule:
    return _view(ctx, await _book(ctx).remove(value.name))


def _spec(name: str, description: str, handler: Any, input_type: type) -> OperationSpec:
    return OperationSpec(
        name=name, description=description, input_type=input_type, output_type=Schedule,
        handler=handler, trust=OPERATOR, audit_kind="cron.write", mutating=True, idempotent=False,
        timeout=10.0,
    )


SPECS = (
    _spec("cron.add", "Add a schedule whose fires submit a job as the system.", cron_add, CronAddInput),
    _spec("cron.pause", "Pause a schedule: nothing fires until it is resumed.", cron_pause, CronNameInput),
    _spec("cron.resume", "Resume a paused schedule; fires due while paused are skipped.", cron_resume,
          CronNameInput),
    _spec("cron.remove", "Remove a schedule (its history stays in the log).", cron_remove, CronNameInput),
)
