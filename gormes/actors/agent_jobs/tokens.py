"""What an agent job's earlier attempts spent in tokens but never gave the job.

A run reports each model turn's usage to its job right after recording the turn.
If the job is paused, cancelled or loses its lease between the two, the job's
fenced token write is refused: the run's stream has the turn, the job lacks its
tokens, and a later attempt that resumes the run serves that turn from the record
without counting it again. So each attempt first compares

- what the runs of earlier attempts used live: their own model turns and token
  reports (not the prefix a resumed run copied from the run before it, which was
  counted when it was made), and everything their subagents used;
- with what the job was given by its runs (its token deltas, child-job rollups
  excluded),

and adds the difference to the job (`missed_tokens`). The job's totals then equal
what its runs used, whatever the timing of a pause.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from gormes.events.base import Recorded
from gormes.events.jobs import JobTokensAdded, Tokens
from gormes.events.runs import (
    OBSERVATION_TYPES,
    RunChildSpawned,
    RunLlmTurn,
    RunStarted,
    RunTokensAdded,
)

ReadRun = Callable[[str], Awaitable[list[Recorded]]]  # run id -> its stream's records


def given_by_runs(job_records: Iterable[Recorded]) -> Tokens:
    """The token deltas the job was given by its own handler (its runs), child-job
    rollups excluded."""
    total = Tokens()
    for record in job_records:
        event = record.event
        if isinstance(event, JobTokensAdded) and event.from_child is None:
            total = total + event.tokens
    return total


def observations(records: Iterable[Recorded]) -> list[Recorded]:
    return sorted((r for r in records if isinstance(r.event, OBSERVATION_TYPES)), key=lambda r: r.event.seq)  # type: ignore[union-attr]


def own_usage(observed: Iterable[Recorded]) -> tuple[Tokens, list[str]]:
    """(the tokens these observations reported to the job themselves, the runs they
    spawned). A finished child's total is not counted here: the child reported it."""
    total = Tokens()
    children: list[str] = []
    for record in observed:
        event = record.event
        if isinstance(event, RunLlmTurn):
            total = total + event.usage
        elif isinstance(event, RunTokensAdded):
            total = total + Tokens(input=event.input, output=event.output, cache_read=event.cache_read)
        elif isinstance(event, RunChildSpawned):
            children.append(event.child_run_id)
    return total, children


def missing(used: Tokens, given: Tokens) -> Tokens:
    """What `used` has beyond `given`, per kind (never negative)."""
    return Tokens(
        input=max(0, used.input - given.input),
        output=max(0, used.output - given.output),
        cache_read=max(0, used.cache_read - given.cache_read),
    )


async def used_live(read_run: ReadRun, run_ids: Iterable[str]) -> Tokens:
    """The tokens the runs `run_ids` (attempts of one job) and their subagents used
    live: a resumed run's copied prefix (a top-level run's or a subagent's) excluded."""
    read: dict[str, list[Recorded]] = {}

    async def read_once(run_id: str) -> list[Recorded]:  # a resumed run's origin is an attempt too
        if run_id not in read:
            read[run_id] = await read_run(run_id)
        return read[run_id]

    total = Tokens()
    for run_id in run_ids:
        total = total + await _run_usage(read_once, run_id)
    return total


async def _run_usage(read_run: ReadRun, run_id: str) -> Tokens:
    records = await read_run(run_id)
    if not records:
        return Tokens()
    observed = observations(records)
    started = records[0].event
    copied = 0
    if isinstance(started, RunStarted) and started.resumed_from is not None:
        origin = started.resumed_from
        copied = sum(1 for r in observations(await read_run(origin.run_id)) if r.position <= origin.position)
    total, children = own_usage(observed[copied:])
    for child in children:
        total = total + await _run_usage(read_run, child)
    return total


async def missed_tokens(read_run: ReadRun, job_records: list[Recorded], run_ids: list[str]) -> Tokens:
    """What the runs of a job's earlier attempts used that the job was not given."""
    if not run_ids:
        return Tokens()
    return missing(await used_live(read_run, run_ids), given_by_runs(job_records))
