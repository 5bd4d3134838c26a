"""`gormes jobs ...`: submit, inspect and steer durable jobs.

Every command that changes a job (submit, cancel, pause, resume, retry, replay,
send, prune) runs its operation through the audited executor as the operator
(gormes/cli/ops.py `operator_session`; decision 0019); the reads ask the
`JobQueue` (or the ledger file) directly. Each prints its typed answer: a short
table or line for people, `--json` for scripts. Bad input (malformed JSON, an
option out of range, an unknown job id) is one line on stderr and a non-zero
exit; nothing recorded is changed, and a refusal by an operation is audited.
A number out of its range reaches the operation (its refusal is audited): the
ranges are the library's (`gormes.actors.jobs.vocabulary`), shown in the help.
Costs are priced with the one pricing table (gormes/cli/pricing.py).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import msgspec

from gormes.actors.jobs.vocabulary import OPTION_BOUNDS
from gormes.cli.pricing import pricing_option, pricing_table
from gormes.errors import UserError
from gormes.events.jobs import BACKOFF_KINDS, POLICIES, STATUSES, TERMINAL
from gormes.printable import printable

T = TypeVar("T")
LIST_LIMIT = (1, 100_000)  # `jobs list` and `runs list --limit`

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


class MalformedInput(UserError):
    """JSON or a duration given on the command line that cannot be parsed."""


def parse_json(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return msgspec.json.decode(text.encode())
    except msgspec.DecodeError as exc:
        raise MalformedInput(f"malformed JSON for {what}: {exc}") from None


def check_range(flag: str, value: float | None, low: float | None, high: float | None) -> None:
    """One clear line (not click's usage block) for an option out of range."""
    if value is None:
        return
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise OutOfRange(f"{flag} must be {bounds}, got {value}")


class OutOfRange(UserError):
    """A command-line option outside the values it accepts."""


def parse_duration_ms(text: str) -> int:
    """'500ms', '30s', '15m', '12h', '7d', '2w' (a bare number is seconds)."""
    match = _DURATION.match(text)
    if not match:
        raise MalformedInput(f"not a duration: {text!r} (try 30s, 15m, 12h, 7d)")
    try:
        return int(float(match.group(1)) * _UNIT_MS[match.group(2) or "s"])
    except OverflowError:
        raise MalformedInput(f"duration {text!r} is too long") from None


class WholeNumber(click.ParamType):
    """An integer, also in exponent form when whole (`1e23`): a huge value reaches
    the operation's own bounds (one line) instead of click's usage block."""

    name = "integer"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int):
            return value
        from decimal import Decimal, InvalidOperation

        text = str(value).strip()
        try:
            number = Decimal(text)
        except InvalidOperation:
            number = None
        if number is None or not number.is_finite() or number != number.to_integral_value() or len(text) > 40:
            flag = param.opts[0] if param is not None and param.opts else "value"
            raise MalformedInput(f"{flag} must be a whole number, got {text!r}")
        return int(number)


WHOLE = WholeNumber()


def operator_session(obj: Any, work: Callable[[Any], Awaitable[T]]) -> T:
    """gormes/cli/ops.py's door, imported only by the commands that change state
    (it loads the executor, which the quick reads of `jobs list` and `get` skip)."""
    from gormes.cli.ops import operator_session as door  # lazy: see above

    return door(obj, work)


async def full_job(door: Any, summary: Any) -> Any:
    """The whole job an operation returned a summary of (for `--json`)."""
    job = _require(await door.queue.get(summary.id), summary.id)
    return msgspec.structs.replace(job, coalesced=summary.coalesced)


def run_queue(target: str | Path, fn: Callable[[Any], Awaitable[T]]) -> T:
    """Open the store (an SQLite path or a PostgreSQL URL) and the queue, run
    `fn(queue)` in trio, close both."""
    # lazy: trio and the store are start-up time the quick reads do without
    import trio

    from gormes.actors.jobs.queue import JobQueue  # lazy, as trio
    from gormes.events.open import open_store  # lazy, as trio

    async def main() -> T:
        async with open_store(target) as store:
            queue = await JobQueue.open(store)
            return await fn(queue)

    return trio.run(main)


def emit_json(value: Any) -> None:
    click.echo(msgspec.json.encode(value).decode())


def job_json(job: Any, cost: float | None = None) -> dict[str, Any]:
    """The job as a JSON object, with its `cost` (gormes.actors.agent_jobs.costs)."""
    data = msgspec.to_builtins(job)
    data["cost"] = cost
    return data


def priced_jobs(conn: Any, jobs: list[Any], table: Any) -> list[dict[str, Any]]:
    """`job_json` of each job, its cost read on `conn` and priced with `table`."""
    from gormes.actors.agent_jobs.costs import job_costs  # lazy: only what prints a cost needs it

    costs = job_costs(conn, [job.id for job in jobs], table)
    return [job_json(job, costs.get(job.id)) for job in jobs]


def read_jobs(obj: Any, select: Callable[[Any], T], table: Any = None) -> tuple[T, Any]:
    """(select(conn), and given a pricing `table` the jobs it found as `job_json`
    objects with their cost, else None), read from the ledger straight from a current
    SQLite file (gormes/cli/quick_read.py), else through the queue, which catches the
    ledger up first; the costs are read in the same snapshot as the jobs."""
    from gormes.cli.quick_read import read_current_ledger

    def both(conn: Any) -> tuple[T, Any]:
        found = select(conn)
        if table is None:
            return found, None
        listed = found if isinstance(found, list) else [found] if found is not None else []
        return found, priced_jobs(conn, listed, table)

    quick, answer = read_current_ledger(obj, both)
    if quick:
        return answer  # type: ignore[return-value]
    return run_queue(obj.target, lambda q: q.store.read_sql(both))


def _require(job: Any, job_id: str) -> Any:
    if job is None:
        from gormes.actors.jobs.state import JobNotFound  # lazy: start-up time, for an error

        raise JobNotFound(f"no job with id {job_id!r}")
    return job


def _row(job: Any) -> str:
    error = f"  {job.error}" if job.error else ""
    return printable(f"{job.id}  {job.status:<16} {job.name:<16} {job.queue:<10} "
                     f"p{job.priority:<3} attempts {job.attempts_made}/{job.max_attempts}{error}")


def _bounds(field: str, default: Any) -> str:
    """The help's range of a job option: the library's (the operation checks it)."""
    bounds = OPTION_BOUNDS[field]
    clamped = " (clamped)" if bounds.clamped else ""
    return f"{bounds}{clamped}, default {default}."


@click.group()
def jobs() -> None:
    """Durable jobs: submit, list, inspect, steer."""


@jobs.command()
@click.argument("name")
@click.option("--data", metavar="JSON", help="The job's data (JSON).")
@click.option("--queue", metavar="Q", help="Queue name (default: default).")
@click.option("--priority", type=WHOLE, help="Lower runs first: " + _bounds("priority", 0))
@click.option("--delay", type=WHOLE, metavar="MS", help="Start after this many ms: " + _bounds("delay_ms", 0))
@click.option("--max-attempts", type=WHOLE, metavar="N", help=_bounds("max_attempts", 3))
@click.option("--backoff", type=click.Choice(BACKOFF_KINDS), help="Retry delay shape.")
@click.option("--backoff-delay", type=WHOLE, metavar="MS", help=_bounds("backoff.delay_ms", 1000))
@click.option("--backoff-jitter", type=float, metavar="F", help=_bounds("backoff.jitter", 0.2))
@click.option("--timeout", type=WHOLE, metavar="MS",
              help="Kill the handler after this: " + _bounds("timeout_ms", "none"))
@click.option("--max-stalled", type=WHOLE, metavar="N", help=_bounds("max_stalled", 5))
@click.option("--parent", metavar="ID", help="Make this a child of job ID.")
@click.option("--on-child-fail", type=click.Choice(POLICIES), help="What a failure of this child does to its parent.")
@click.option("--max-children", type=WHOLE, metavar="N", help="Live children at most: " + _bounds("max_children", "none"))
@click.option("--idempotency-key", metavar="K")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@click.pass_obj
def submit(obj: Any, name: str, data: str | None, queue: str | None, priority: int | None,
           delay: int | None, max_attempts: int | None, backoff: str | None,
           backoff_delay: int | None, backoff_jitter: float | None, timeout: int | None,
           max_stalled: int | None, parent: str | None, on_child_fail: str | None,
           max_children: int | None, idempotency_key: str | None, as_json: bool) -> None:
    """Submit a job NAME; prints its id."""
    payload = parse_json(data, "--data")
    options: dict[str, Any] = {}
    for key, value in (("queue", queue), ("priority", priority), ("delay_ms", delay),
                       ("max_attempts", max_attempts), ("timeout_ms", timeout),
                       ("max_stalled", max_stalled), ("parent_id", parent),
                       ("on_child_fail", on_child_fail), ("max_children", max_children),
                       ("idempotency_key", idempotency_key)):
        if value is not None:
            options[key] = value
    shape = {k: v for k, v in (("kind", backoff), ("delay_ms", backoff_delay),
                               ("jitter", backoff_jitter)) if v is not None}
    if shape:
        options["backoff"] = shape
    async def go(door: Any) -> Any:
        job = await door.call("job.submit", {"name": name, "data": payload, "options": options})
        return job_json(await full_job(door, job)) if as_json else job.id

    shown = operator_session(obj, go)
    emit_json(shown) if as_json else click.echo(shown)


@jobs.command(name="list")
@click.option("--status", type=click.Choice(STATUSES))
@click.option("--queue", metavar="Q")
@click.option("--name", metavar="N")
@click.option("--limit", type=int, default=100, show_default=True, help="%d..%d." % LIST_LIMIT)
@pricing_option
@click.option("--json", "as_json", is_flag=True, help="A JSON array of jobs, each with its cost.")
@click.pass_obj
def list_(obj: Any, status: str | None, queue: str | None, name: str | None, limit: int,
          pricing: str | None, as_json: bool) -> None:
    """List jobs, newest first."""
    check_range("--limit", limit, *LIST_LIMIT)
    table = pricing_table(pricing) if as_json else None  # the rows for people show no cost
    from gormes.actors.jobs.views import select_jobs  # lazy: start-up time of the other commands

    found, priced = read_jobs(obj, lambda conn: select_jobs(conn, status, queue, name, limit), table)
    if as_json:
        emit_json(priced)
    else:
        for job in found:
            click.echo(_row(job))


@jobs.command()
@click.argument("job_id", metavar="ID")
@pricing_option
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def get(obj: Any, job_id: str, pricing: str | None, as_json: bool) -> None:
    """Show one job, with its cost."""
    table = pricing_table(pricing)
    from gormes.actors.jobs.views import select_job  # lazy: start-up time of the other commands

    found, priced = read_jobs(obj, lambda conn: select_job(conn, job_id), table)
    _require(found, job_id)
    data = priced[0]
    if as_json:
        emit_json(data)
        return
    for key in ("id", "name", "queue", "status", "priority", "data", "result", "error",
                "attempts_made", "attempts_started", "stalled_counter", "max_attempts",
                "max_stalled", "parent_id", "depth", "progress", "tokens", "cost",
                "created_at", "started_at", "finished_at", "lock_until", "delay_until",
                "idempotency_key"):
        value = data.get(key)
        text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
        click.echo(f"{key:<17} {printable(text)}")  # a newline in a name forges no line
    click.echo(f"{'submitter':<17} {_submitter_text(data.get('submitter'))}")


def _submitter_text(submitter: dict[str, Any] | None) -> str:
    """`gateway mcp:client scope chat:x`; `-` for a job recorded without one."""
    if not submitter:
        return "-"
    scope = submitter.get("scope")
    return f"{submitter['trust']} {submitter['caller']}" + (f" scope {scope}" if scope else "")


def _steer(verb: str, help_text: str) -> click.Command:
    @click.command(name=verb, help=help_text)
    @click.argument("job_id", metavar="ID")
    @click.option("--json", "as_json", is_flag=True)
    @click.pass_obj
    def command(obj: Any, job_id: str, as_json: bool) -> None:
        async def go(door: Any) -> Any:
            result = await door.call(f"job.{verb}", {"id": job_id})
            if verb == "cancel":  # the ids cancelled: the job and its live descendants
                return result.cancelled
            return job_json(await full_job(door, result)) if as_json else f"{result.id} {result.status}"

        shown = operator_session(obj, go)
        if as_json:
            emit_json(shown)
        elif verb == "cancel":
            click.echo("\n".join(f"{i} cancelled" for i in shown))
        else:
            click.echo(shown)

    return command


jobs.add_command(_steer("cancel", "Cancel a job and its non-terminal descendants."))
jobs.add_command(_steer("pause", "Pause a waiting, delayed or active job."))
jobs.add_command(_steer("resume", "Resume a paused job."))
jobs.add_command(_steer("retry", "Send a failed or dead job back to waiting."))


@jobs.command()
@click.argument("job_id", metavar="ID")
@click.option("--data", metavar="JSON", help="Overrides deep-merged into the job's data.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def replay(obj: Any, job_id: str, data: str | None, as_json: bool) -> None:
    """Submit a terminal job again as a new job; prints the new id."""
    overrides = parse_json(data, "--data")

    async def go(door: Any) -> Any:
        job = await door.call("job.replay", {"id": job_id, "data": overrides})
        return job_json(await full_job(door, job)) if as_json else job.id

    shown = operator_session(obj, go)
    emit_json(shown) if as_json else click.echo(shown)


@jobs.command()
@click.argument("job_id", metavar="ID")
@click.option("--payload", metavar="JSON", required=True, help="The message (JSON).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def send(obj: Any, job_id: str, payload: str, as_json: bool) -> None:
    """Send an operator message to a job's inbox; prints the message id."""
    message = parse_json(payload, "--payload")
    sent = operator_session(obj, lambda door: door.call("job.send", {"id": job_id, "payload": message}))
    emit_json(sent) if as_json else click.echo(sent.id)


@jobs.command()
@click.argument("job_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def inbox(obj: Any, job_id: str, as_json: bool) -> None:
    """Show a job's inbox (read and unread; reading here records no receipt)."""

    async def read(q: Any) -> Any:
        _require(await q.get(job_id), job_id)
        return await q.inbox(job_id)

    messages = run_queue(obj.target, read)
    if as_json:
        emit_json(messages)
        return
    for m in messages:
        state = "read" if m.read_at is not None else "unread"
        click.echo(f"{m.id}  {m.sender:<12} {state:<6} {msgspec.json.encode(m.payload).decode()}")


@jobs.command()
@pricing_option
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def stats(obj: Any, pricing: str | None, as_json: bool) -> None:
    """Counts by status and queue, token totals, and what the jobs' model turns cost."""
    table = pricing_table(pricing)
    from gormes.actors.agent_jobs.costs import ledger_cost  # lazy: only what prints a cost needs it
    from gormes.providers.pricing import format_cost  # lazy, as the costs

    async def read(q: Any) -> tuple[Any, float | None]:
        return await q.stats(), await q.store.read_sql(lambda conn: ledger_cost(conn, table))

    result, cost = run_queue(obj.target, read)
    data = msgspec.to_builtins(result)
    data["cost"] = cost
    if as_json:
        emit_json(data)
        return
    click.echo(f"total {result.total}")
    for status in STATUSES:
        if result.by_status.get(status):
            click.echo(f"  {status:<17} {result.by_status[status]}")
    t = result.tokens
    click.echo(f"tokens input {t.input} output {t.output} cache_read {t.cache_read}")
    click.echo(f"cost {format_cost(cost)}")


@jobs.command()
@click.option("--older-than", "older_than", required=True, metavar="DURATION",
              help="Finished more than this long ago: 30s, 15m, 12h, 7d.")
@click.option("--dry-run", is_flag=True, help="List what would go; remove nothing.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def prune(obj: Any, older_than: str, dry_run: bool, as_json: bool) -> None:
    """Remove terminal jobs that finished before a cutoff."""
    cutoff = parse_duration_ms(older_than)
    result = operator_session(
        obj, lambda door: door.call("job.prune", {"older_than_ms": cutoff, "dry_run": dry_run}))
    if as_json:
        emit_json({"ids": result.ids, "count": result.count, "dry_run": result.dry_run})
    else:
        verb = "would prune" if dry_run else "pruned"
        click.echo(f"{verb} {result.count} job(s)")


@jobs.command()
@click.argument("job_id", metavar="ID")
@click.option("--timeout", type=float, metavar="SECONDS",
              help="Give up (exit 1) if the job is not terminal by then.")
@click.pass_obj
def wait(obj: Any, job_id: str, timeout: float | None) -> None:
    """Wait until a job is terminal; print its status (exit 0)."""
    check_range("--timeout", timeout, 0, None)
    import trio

    async def until_terminal(q: Any) -> str:
        job = _require(await q.get(job_id), job_id)
        with trio.move_on_after(timeout if timeout is not None else float("inf")):
            while job.status not in TERMINAL:
                seen = q.store.generation
                job = _require(await q.get(job_id), job_id)
                if job.status in TERMINAL:
                    break
                await q.store.wait_for_change(seen)
        return job.status

    status = run_queue(obj.target, until_terminal)
    if status not in TERMINAL:
        raise WaitTimedOut(f"job {job_id} is still {status} after {timeout} s")
    click.echo(status)


class WaitTimedOut(UserError):
    exit_code = 1
