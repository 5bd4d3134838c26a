"""`gormes jobs ...`: submit, inspect and steer durable jobs.

The commands that change a job (submit, cancel, pause, resume, retry, replay,
send, prune) are each one operation, run through the audited executor as the
operator (decision 0019); their options are derived from the operation's input
type and they live in gormes/cli/job_operations.py, imported only when one of
them is asked for (gormes/cli/lazy_group.py). The reads here ask the `JobQueue`
(or the ledger file) directly. Each prints its typed answer: a short table or
line for people, `--json` for scripts. Bad input (malformed JSON, an option out
of range, an unknown job id) is one line on stderr and a non-zero exit; nothing
recorded is changed, and a refusal by an operation is audited.
Costs are priced with the one pricing table (gormes/cli/pricing.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import msgspec

from gormes.cli.lazy_group import LazyCommands
from gormes.cli.pricing import pricing_option, pricing_table
from gormes.errors import UserError
from gormes.events.jobs import STATUSES, TERMINAL
from gormes.printable import printable

if TYPE_CHECKING:
    from gormes.actors.jobs.queue import Job, JobQueue
    from gormes.events.store import EventStore

T = TypeVar("T")
LIST_LIMIT = (1, 100_000)  # `jobs list` and `runs list --limit`


def check_range(flag: str, value: float | None, low: float | None, high: float | None) -> None:
    """One clear line (not click's usage block) for an option out of range."""
    if value is None:
        return
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise OutOfRange(f"{flag} must be {bounds}, got {value}")


class OutOfRange(UserError):
    """A command-line option outside the values it accepts."""


def run_queue(target: str | Path, fn: Callable[[EventStore, JobQueue], Awaitable[T]]) -> T:
    """Open the store (an SQLite path or a PostgreSQL URL) and the queue, run
    `fn(store, queue)` in trio, close both. For the read commands: a database that
    is not there is "no gormes database at ...", never created."""
    # lazy: trio and the store are start-up time the quick reads do without
    import trio

    from gormes.actors.jobs.queue import JobQueue  # lazy, as trio
    from gormes.events.open import open_store  # lazy, as trio

    async def main() -> T:
        async with open_store(target, create=False) as store:
            queue = await JobQueue.open(store)
            return await fn(store, queue)

    return trio.run(main)


def emit_json(value: Any) -> None:
    click.echo(msgspec.json.encode(value).decode())


def job_json(job: Any, cost: float | None = None, spending: Any = None, pricing: str = "") -> dict[str, Any]:
    """The job as a JSON object, with its `cost` (gormes.actors.agent_jobs.costs), the
    tokens its attempts `wasted` and their `wasted_cost`, and the `pricing` table's
    version that priced both."""
    data = msgspec.to_builtins(job)
    data["cost"] = cost
    data["wasted"] = msgspec.to_builtins(spending.wasted) if spending is not None else None
    data["wasted_cost"] = spending.wasted_cost if spending is not None else None
    data["pricing"] = pricing
    return data


def priced_jobs(conn: Any, jobs: list[Any], table: Any) -> list[dict[str, Any]]:
    """`job_json` of each job, its cost read on `conn` and priced with `table`."""
    from gormes.actors.agent_jobs.costs import job_costs, job_spending  # lazy: only what prints a cost needs it

    ids = [job.id for job in jobs]
    costs, spending = job_costs(conn, ids, table), job_spending(conn, ids, table)
    return [job_json(job, costs.get(job.id), spending.get(job.id), table.version) for job in jobs]


def cost_text(dollars: float | None, pricing: str) -> str:
    """`$0.0123 (pricing 2025.1)`: a cost names the table that priced it."""
    from gormes.providers.pricing import format_cost  # lazy, as the costs

    return f"{format_cost(dollars)} (pricing {pricing})"


def tokens_text(t: Any) -> str:
    """Every kind of a Tokens (or its JSON), in its order."""
    get = t.get if isinstance(t, dict) else lambda kind: getattr(t, kind)
    return (f"input {get('input')} output {get('output')} cache_read {get('cache_read')}"
            f" cache_write {get('cache_write')} reasoning {get('reasoning')}")


def read_jobs(obj: Any, select: Callable[[Any], T], table: Any = None) -> tuple[T, Any]:
    """(select(conn), and given a pricing `table` the jobs it found as `job_json`
    objects with their cost, else None), read from the ledger straight from a current
    SQLite file (gormes/projections/quick_read.py), else through the queue, which catches the
    ledger up first; the costs are read in the same snapshot as the jobs."""
    from gormes.projections.quick_read import read_current_ledger  # lazy: start-up time

    def both(conn: Any) -> tuple[T, Any]:
        found = select(conn)
        if table is None:
            return found, None
        listed = found if isinstance(found, list) else [found] if found is not None else []
        return found, priced_jobs(conn, listed, table)

    quick, answer = read_current_ledger(None if obj.url is not None else obj.db, both)
    if quick:
        return answer  # type: ignore[return-value]
    return run_queue(obj.target, lambda store, _queue: store.read_sql(both))


def require_job(job: Any, job_id: str) -> Any:
    """`job`, or `JobNotFound` naming `job_id` when it is None."""
    if job is None:
        from gormes.actors.jobs.state import JobNotFound  # lazy: start-up time, for an error

        raise JobNotFound(f"no job with id {job_id!r}")
    return job


def _row(job: Any) -> str:
    error = f"  {job.error}" if job.error else ""
    return printable(f"{job.id}  {job.status:<16} {job.name:<16} {job.queue:<10} "
                     f"p{job.priority:<3} attempts {job.attempts_made}/{job.max_attempts}{error}")


# The commands that are one operation each (gormes/cli/job_operations.py).
OPERATIONS = ("submit", "cancel", "pause", "resume", "retry", "replay", "send", "prune")


@click.group(cls=LazyCommands, later={name: "gormes.cli.job_operations" for name in OPERATIONS})
def jobs() -> None:
    """Durable jobs: submit, list, inspect, steer."""


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
    # The rows for people show a cost when --pricing asks for one (pricing is work).
    table = pricing_table(pricing) if as_json or pricing else None
    from gormes.actors.jobs.views import select_jobs  # lazy: start-up time of the other commands

    found, priced = read_jobs(obj, lambda conn: select_jobs(conn, status, queue, name, limit), table)
    if as_json:
        emit_json(priced)
    elif priced is not None:
        for job, data in zip(found, priced, strict=True):
            click.echo(f"{_row(job)}  cost {cost_text(data['cost'], data['pricing'])}")
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
    require_job(found, job_id)
    data = priced[0]
    if as_json:
        emit_json(data)
        return
    for key in ("id", "name", "queue", "status", "priority", "data", "result", "error",
                "attempts_made", "attempts_started", "stalled_counter", "max_attempts",
                "max_stalled", "parent_id", "depth", "progress", "tokens", "wasted", "cost",
                "wasted_cost", "created_at", "started_at", "finished_at", "lock_until", "delay_until",
                "idempotency_key", "concurrency_key", "concurrency_limit", "debounce_key",
                "submissions"):
        value = data.get(key)
        if key in ("cost", "wasted_cost"):
            text = cost_text(value, data["pricing"])
        elif key in ("tokens", "wasted") and value is not None:
            text = tokens_text(value)
        else:
            text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
        click.echo(f"{key:<17} {printable(text)}")  # a newline in a name forges no line
    click.echo(f"{'submitter':<17} {_submitter_text(data.get('submitter'))}")


def _submitter_text(submitter: dict[str, Any] | None) -> str:
    """`gateway mcp:client scope chat:x`; `-` for a job recorded without one."""
    if not submitter:
        return "-"
    scope = submitter.get("scope")
    return f"{submitter['trust']} {submitter['caller']}" + (f" scope {scope}" if scope else "")


@jobs.command()
@click.argument("job_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def inbox(obj: Any, job_id: str, as_json: bool) -> None:
    """Show a job's inbox (read and unread; reading here records no receipt)."""

    async def read(_store: EventStore, q: JobQueue) -> Any:
        require_job(await q.get(job_id), job_id)
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
    """Counts by status and queue, token totals (spent, and wasted by attempts whose
    work was not kept), and what the jobs' model turns cost: priced per model from
    the ledger's totals (a row per model, whatever the number of jobs)."""
    table = pricing_table(pricing)
    from gormes.actors.agent_jobs.costs import LedgerCost, ledger_costs  # lazy: only what prints a cost needs it

    async def read(store: EventStore, q: JobQueue) -> tuple[Any, LedgerCost]:
        return await q.stats(), await store.read_sql(lambda conn: ledger_costs(conn, table))

    result, priced = run_queue(obj.target, read)
    data = msgspec.to_builtins(result)
    data.update(cost=priced.cost, wasted_cost=priced.wasted_cost, unpriced=msgspec.to_builtins(priced.unpriced),
                pricing=priced.pricing)
    if as_json:
        emit_json(data)
        return
    click.echo(f"total {result.total}")
    for status in STATUSES:
        if result.by_status.get(status):
            click.echo(f"  {status:<17} {result.by_status[status]}")
    click.echo(f"tokens {tokens_text(result.tokens)}")
    click.echo(f"wasted {tokens_text(result.wasted)}")
    click.echo(f"cost {cost_text(priced.cost, priced.pricing)}")
    click.echo(f"wasted cost {cost_text(priced.wasted_cost, priced.pricing)}")
    if any(msgspec.to_builtins(priced.unpriced).values()):
        click.echo(f"not priced (no model recorded) {tokens_text(priced.unpriced)}")


@jobs.command()
@click.argument("job_id", metavar="ID")
@click.option("--timeout", type=float, metavar="SECONDS",
              help="Give up (exit 1) if the job is not terminal by then.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the ended job as JSON: id, status, result, error.")
@click.pass_obj
def wait(obj: Any, job_id: str, timeout: float | None, as_json: bool) -> None:
    """Wait until a job is terminal; print its status (exit 0)."""
    check_range("--timeout", timeout, 0, None)
    import trio  # lazy: start-up time of the quick reads

    async def until_terminal(store: EventStore, q: JobQueue) -> Job:
        job = require_job(await q.get(job_id), job_id)
        with trio.move_on_after(timeout if timeout is not None else float("inf")):
            while job.status not in TERMINAL:
                seen = store.generation  # read before the get: a change after it wakes the wait
                job = require_job(await q.get(job_id), job_id)
                if job.status in TERMINAL:
                    break
                await store.wait_for_change(seen)
        return job

    job = run_queue(obj.target, until_terminal)
    if job.status not in TERMINAL:
        raise WaitTimedOut(f"job {job_id} is still {job.status} after {timeout} s")
    if as_json:
        emit_json({"id": job.id, "status": job.status, "result": job.result, "error": job.error})
        return
    click.echo(job.status)


class WaitTimedOut(UserError):
    exit_code = 1
