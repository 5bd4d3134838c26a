"""The operator's repair of the job queue: job.retry, job.replay and job.prune.

Operator-only and never offered to models: they act on any job, whoever owns it
(`gormes jobs retry|replay|prune` call them, audited like every other operation;
decision 0019). The operations callers of other classes may use too are in
gormes/tools/jobs.py (submit, get, send, cancel, list, pause, resume, inbox).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from gormes.tools.jobs import JobId, JobSummary
from gormes.ops.spec import OperationContext, OperationSpec, OperationUnavailable

OPERATOR = frozenset({"operator"})


def job_queue(ctx: OperationContext) -> Any:
    if ctx.jobs is None:
        raise OperationUnavailable("no job queue is configured: the job operations are off")
    return ctx.jobs


def job_summary(job: Any) -> JobSummary:
    return msgspec.convert(job, JobSummary, from_attributes=True)


class JobSteerInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The job to steer."""

    id: JobId


async def job_retry(ctx: OperationContext, value: JobSteerInput) -> JobSummary:
    return job_summary(await job_queue(ctx).retry(value.id))


class JobReplayInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Submit a terminal job again as a new job, its data deep-merged with `data`."""

    id: JobId
    data: Any = None


async def job_replay(ctx: OperationContext, value: JobReplayInput) -> JobSummary:
    return job_summary(await job_queue(ctx).replay(value.id, value.data))


class JobPruneInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Remove terminal jobs that finished more than `older_than_ms` ago from the ledger."""

    older_than_ms: Annotated[int, msgspec.Meta(ge=0, le=2**53)]
    dry_run: bool = False


class JobsPruned(msgspec.Struct, kw_only=True):
    ids: list[str]
    count: int
    dry_run: bool


async def job_prune(ctx: OperationContext, value: JobPruneInput) -> JobsPruned:
    result = await job_queue(ctx).prune(value.older_than_ms, dry_run=value.dry_run)
    return JobsPruned(ids=result.ids, count=result.count, dry_run=result.dry_run)


def _steer(name: str, description: str, handler: Any, input_type: type = JobSteerInput,
           output_type: type = JobSummary) -> OperationSpec:
    return OperationSpec(
        name=name, description=description, input_type=input_type, output_type=output_type,
        handler=handler, trust=OPERATOR, audit_kind="job.write", mutating=True, idempotent=False,
        timeout=30.0, doctor_checks=("job-queue",),
    )


SPECS = (
    _steer("job.retry", "Send a failed or dead job back to waiting.", job_retry),
    _steer("job.replay", "Submit a terminal job again as a new job; returns the new job.", job_replay,
           JobReplayInput),
    _steer("job.prune", "Remove terminal jobs that finished before a cutoff (their streams stay).",
           job_prune, JobPruneInput, JobsPruned),
)
