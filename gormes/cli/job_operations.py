"""`gormes jobs submit|cancel|pause|resume|retry|replay|send|prune`: each one job
operation (job.* in gormes/tools/jobs.py and jobs_admin.py), run as the operator
through the audited executor (decision 0019), its options derived from the
operation's input type (gormes/cli/derive.py).

`submit`'s options are the fields of `JobOptions` (flattened: `--priority`,
`--backoff-kind`, ...), each with the range `gormes.actors.jobs.vocabulary`
gives it; the older flags README and scripts use (`--delay`, `--timeout`,
`--backoff`, `--backoff-delay`, `--parent`) are kept as aliases. A number out of
its range reaches the operation, so its refusal is audited; text that is no
number at all is refused here, before anything is opened.

This module is imported when one of its commands is asked for
(gormes/cli/lazy_group.py): it loads the executor, which `jobs list` and `get` skip.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click
import msgspec

from gormes.actors.jobs.vocabulary import OPTION_BOUNDS
from gormes.cli.derive import DURATION_MS, OperatorCall, Shown, operation_command, spec_named
from gormes.cli.imports import import_option
from gormes.cli.jobs import emit_json, job_json, jobs, require_job
from gormes.ops.spec import OperationSpec
from gormes.tools import jobs as job_ops
from gormes.tools import jobs_admin

if TYPE_CHECKING:
    from gormes.cli.ops import OperatorDoor

T = TypeVar("T")

json_option = click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")


def operator_session(obj: Any, work: Callable[[OperatorDoor], Awaitable[T]]) -> T:
    from gormes.cli.ops import operator_session as door  # lazy: the registry loads only to run one

    return door(obj, work)


async def full_job(door: OperatorDoor, summary: Any) -> dict[str, Any]:
    """The whole job an operation returned a summary of, as JSON (for `--json`)."""
    assert door.queue is not None  # operator_session opens the queue
    job = require_job(await door.queue.get(summary.id), summary.id)
    return job_json(msgspec.structs.replace(job, coalesced=summary.coalesced))


def bounded(field: str, text: str = "", **shown: Any) -> Shown:
    """How a job option is shown: its help ends with its range, the library's
    (OPTION_BOUNDS; the operation checks it, on every door)."""
    bounds = OPTION_BOUNDS[field]
    clamped = " (clamped into it)" if bounds.clamped else ""
    lead = f"{text}: " if text else ""
    return Shown(help=f"{lead}{bounds}{clamped}.", **shown)


SUBMIT = {
    "name": Shown(metavar="NAME"),
    "data": Shown(metavar="JSON", help="The job's data (JSON)."),
    "options": Shown(prefix=""),  # the job's options are the command's: --queue, not --options-queue
    "options.queue": Shown(metavar="Q", help="The queue it waits in."),
    "options.priority": bounded("priority", "Lower runs first", metavar="N"),
    "options.delay_ms": bounded("delay_ms", "Start after this many ms", metavar="MS", aliases=("--delay",)),
    "options.max_attempts": bounded("max_attempts", "Attempts before it is dead", metavar="N"),
    "options.backoff.kind": Shown(aliases=("--backoff",), help="The retry delay's shape."),
    "options.backoff.delay_ms": bounded("backoff.delay_ms", "The retry delay in ms", metavar="MS",
                                        aliases=("--backoff-delay",)),
    "options.backoff.jitter": bounded("backoff.jitter", "The retry delay's jitter", metavar="F"),
    "options.timeout_ms": bounded("timeout_ms", "Kill the handler after this many ms", metavar="MS",
                                  aliases=("--timeout",)),
    "options.max_stalled": bounded("max_stalled", "Stalls before it is dead", metavar="N"),
    "options.parent_id": Shown(metavar="ID", aliases=("--parent",), help="Make this a child of job ID."),
    "options.on_child_fail": Shown(help="What a failure of this child does to its parent."),
    "options.max_children": bounded("max_children", "Live children at most", metavar="N"),
    "options.idempotency_key": Shown(metavar="K", help="A live job of yours holding this key is returned "
                                     "instead of a new one."),
    "options.max_waiting": bounded("max_waiting", "With this many waiting in the queue, the newest is "
                                   "returned instead of a new one", metavar="N"),
    "options.remove_on_complete": Shown(help="Take the job out of the ledger once it completes."),
    "options.remove_on_fail": Shown(help="Take the job out of the ledger once it is dead."),
    "options.concurrency_key": Shown(metavar="K", help="At most --concurrency-limit jobs with this "
                                     "key run at once, across workers and hosts."),
    "options.concurrency_limit": bounded("concurrency_limit", "Jobs with the key held at once "
                                         "(default 1)", metavar="N"),
    "options.debounce_key": Shown(metavar="K", help="Submissions of this job name with this key "
                                  "inside the window become one job (docs/control.md)."),
    "options.debounce_ms": bounded("debounce_ms", "The window: the job runs once this passes with no new "
                                   "submission: 500ms, 5s, 2m (a bare number is seconds); in ms",
                                   flag="--debounce", type=DURATION_MS, metavar="DURATION"),
    "options.debounce_mode": Shown(help="last: the last submission's data; merge: the list of "
                                   "every submission's data."),
    "options.debounce_max_ms": bounded("debounce_max_ms", "The job runs at most this long after its "
                                       "first submission, however many follow; in ms",
                                       flag="--debounce-max", type=DURATION_MS, metavar="DURATION"),
}


@operation_command(jobs, "submit", spec_named(job_ops.SPECS, "job.submit"), arguments=("name",), shown=SUBMIT)
@json_option
@import_option
def submit(call: OperatorCall, as_json: bool, imports: tuple[str, ...]) -> None:
    """Submit a job NAME; prints its id.

    An `agent` job's data is checked as `gormes run` checks the same input (its
    handler, model, input and tools exist) before it is queued: --import the
    modules that declare the handlers and operations a worker's --import gives it."""
    if call.value.name == "agent":  # data the agent job cannot run is refused before it is queued
        # Lazy: the runs and the registry load only for it.
        from gormes.tools.agent_job_data import check_submission
        from gormes.tools.builtin import default_registry
        from gormes.tools.imports import load_imports

        load_imports(imports)
        check_submission(call.value.data, default_registry())

    async def go(door: OperatorDoor) -> Any:
        job = await call.on(door)
        return await full_job(door, job) if as_json else job.id

    shown = operator_session(call.obj, go)
    emit_json(shown) if as_json else click.echo(shown)


JOB_ID = {"id": Shown(metavar="ID")}


@operation_command(jobs, "cancel", spec_named(job_ops.SPECS, "job.cancel"), arguments=("id",), shown=JOB_ID)
@click.option("--json", "as_json", is_flag=True, help="Print the ids cancelled as JSON.")
def cancel(call: OperatorCall, as_json: bool) -> None:
    """Cancel a job and its non-terminal descendants."""
    cancelled = call.run().cancelled  # the job first, then its live descendants
    if as_json:
        emit_json(cancelled)
    else:
        click.echo("\n".join(f"{job_id} cancelled" for job_id in cancelled))


def _steer(verb: str, specs: Sequence[OperationSpec], doc: str) -> None:
    @json_option
    def command(call: OperatorCall, as_json: bool) -> None:
        async def go(door: OperatorDoor) -> Any:
            job = await call.on(door)
            return await full_job(door, job) if as_json else f"{job.id} {job.status}"

        shown = operator_session(call.obj, go)
        emit_json(shown) if as_json else click.echo(shown)

    command.__doc__ = doc
    operation_command(jobs, verb, spec_named(specs, f"job.{verb}"), arguments=("id",), shown=JOB_ID)(command)


_steer("pause", job_ops.SPECS, "Pause a waiting, delayed or active job.")
_steer("resume", job_ops.SPECS, "Resume a paused job.")
_steer("retry", jobs_admin.SPECS, "Send a failed or dead job back to waiting.")


@operation_command(jobs, "replay", spec_named(jobs_admin.SPECS, "job.replay"), arguments=("id",), shown={
    **JOB_ID, "data": Shown(metavar="JSON", help="Overrides deep-merged into the job's data (JSON)."),
})
@json_option
def replay(call: OperatorCall, as_json: bool) -> None:
    """Submit a terminal job again as a new job; prints the new id."""

    async def go(door: OperatorDoor) -> Any:
        job = await call.on(door)
        return await full_job(door, job) if as_json else job.id

    shown = operator_session(call.obj, go)
    emit_json(shown) if as_json else click.echo(shown)


@operation_command(jobs, "send", spec_named(job_ops.SPECS, "job.send"), arguments=("id",), shown={
    **JOB_ID, "payload": Shown(metavar="JSON", help="The message (JSON)."),
})
@click.option("--json", "as_json", is_flag=True, help="Print the message sent as JSON.")
def send(call: OperatorCall, as_json: bool) -> None:
    """Send an operator message to a job's inbox; prints the message id."""
    sent = call.run()
    emit_json(sent) if as_json else click.echo(sent.id)


@operation_command(jobs, "prune", spec_named(jobs_admin.SPECS, "job.prune"), shown={
    "older_than_ms": Shown(flag="--older-than", type=DURATION_MS, metavar="DURATION",
                           help="Finished more than this long ago: 30s, 15m, 12h, 7d (a bare number is seconds)."),
    "dry_run": Shown(help="List what would go; remove nothing."),
})
@click.option("--json", "as_json", is_flag=True)
def prune(call: OperatorCall, as_json: bool) -> None:
    """Remove terminal jobs that finished before a cutoff."""
    result = call.run()
    if as_json:
        emit_json({"ids": result.ids, "count": result.count, "dry_run": result.dry_run})
    else:
        click.echo(f"{'would prune' if result.dry_run else 'pruned'} {result.count} job(s)")
