"""What an agent job's earlier attempts spent in tokens but never gave the job.

A run reports each model turn's usage to its job after recording the turn: with
the job's next inbox read (the same transaction), before a park, or at the
attempt's end (handler.py). If the job is paused, cancelled or loses its lease
in between, the job's fenced token write is refused: the run's stream has the
turn, the job lacks its tokens, and a later attempt that resumes the run serves
that turn from the record without counting it again. So each attempt first compares

- what the runs of earlier attempts used live: their own model turns (those the
  API billed though they failed or were cut short included) and token
  reports (not the prefix a resumed run copied from the run before it, which was
  counted when it was made), and everything their subagents used;
- with what the job was given by its runs (its token deltas, child-job rollups
  excluded),

and adds the difference to the job (`missed_tokens`), per model: each model
turn's usage is counted under its model, a handler's own report under None, as
the runs report them (`JobTokensAdded.model`). A job given tokens before they
carried a model (decision 0035) has them under None: if the per-model difference
would give the job more than the difference of the totals, the totals' difference
is given, under None (never more than what is missing). The job's totals then
equal what its runs used, whatever the timing of a pause.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from gormes.events.base import Recorded
from gormes.events.jobs import TOKEN_KINDS, JobTokensAdded, Tokens
from gormes.events.runs import (
    OBSERVATION_TYPES,
    RunChildSpawned,
    RunLlmCut,
    RunLlmFailed,
    RunLlmTurn,
    RunStarted,
    RunTokensAdded,
    turn_usage,
)

ReadRun = Callable[[str], Awaitable[list[Recorded]]]  # run id -> its stream's records
ByModel = dict["str | None", Tokens]  # model (None: reported without one) -> tokens


def _add(into: ByModel, model: str | None, tokens: Tokens) -> None:
    into[model] = into.get(model, Tokens()) + tokens


def total(by_model: ByModel) -> Tokens:
    return sum(by_model.values(), Tokens())


def given_by_runs(job_records: Iterable[Recorded]) -> ByModel:
    """The token deltas the job was given by its own handler (its runs), per model,
    child-job rollups excluded."""
    given: ByModel = {}
    for record in job_records:
        event = record.event
        if isinstance(event, JobTokensAdded) and event.from_child is None:
            _add(given, event.model, event.tokens)
    return given


def observations(records: Iterable[Recorded]) -> list[Recorded]:
    return sorted((r for r in records if isinstance(r.event, OBSERVATION_TYPES)), key=lambda r: r.event.seq)  # type: ignore[union-attr]


def own_usage(observed: Iterable[Recorded]) -> tuple[ByModel, list[str]]:
    """(the tokens these observations reported to the job themselves, per model; the
    runs they spawned). A finished child's total is not counted here: the child
    reported it."""
    used: ByModel = {}
    children: list[str] = []
    for record in observed:
        event = record.event
        if isinstance(event, RunLlmTurn):
            _add(used, event.model, turn_usage(event))
        elif isinstance(event, RunLlmFailed) and event.usage is not None:  # billed (decision 0069)
            _add(used, event.model, event.usage)
        elif isinstance(event, RunTokensAdded):
            _add(used, None, Tokens(input=event.input, output=event.output, cache_read=event.cache_read,
                                    cache_write=event.cache_write))
        elif isinstance(event, RunChildSpawned):
            children.append(event.child_run_id)
    return used, children


def missing(used: Tokens, given: Tokens) -> Tokens:
    """What `used` has beyond `given`, per kind (never negative)."""
    return Tokens(**{kind: max(0, getattr(used, kind) - getattr(given, kind)) for kind in TOKEN_KINDS})


def missing_by_model(used: ByModel, given: ByModel) -> ByModel:
    """What `used` has beyond `given`, per model (see the module doc); models with
    nothing missing left out."""
    per_model = {model: missing(tokens, given.get(model, Tokens())) for model, tokens in used.items()}
    per_model = {model: tokens for model, tokens in per_model.items() if tokens != Tokens()}
    overall = missing(total(used), total(given))
    summed = total(per_model)
    if any(getattr(summed, kind) > getattr(overall, kind) for kind in TOKEN_KINDS):
        return {None: overall} if overall != Tokens() else {}
    return per_model


async def used_live(read_run: ReadRun, run_ids: Iterable[str]) -> ByModel:
    """The tokens the runs `run_ids` (attempts of one job) and their subagents used
    live, per model: a resumed run's copied prefix (a top-level run's or a
    subagent's) excluded."""
    read: dict[str, list[Recorded]] = {}

    async def read_once(run_id: str) -> list[Recorded]:  # a resumed run's origin is an attempt too
        if run_id not in read:
            read[run_id] = await read_run(run_id)
        return read[run_id]

    used: ByModel = {}
    for run_id in run_ids:
        await _run_usage(read_once, run_id, used)
    return used


async def _run_usage(read_run: ReadRun, run_id: str, into: ByModel) -> None:
    records = await read_run(run_id)
    if not records:
        return
    observed = observations(records)
    started = records[0].event
    copied = 0
    if isinstance(started, RunStarted) and started.resumed_from is not None:
        origin = started.resumed_from
        copied = sum(1 for r in observations(await read_run(origin.run_id)) if r.position <= origin.position)
    used, children = own_usage(observed[copied:])
    for record in records:  # its turns cut short: not observations, never copied (decision 0080)
        if isinstance(record.event, RunLlmCut) and record.event.usage is not None:
            _add(used, record.event.model, record.event.usage)
    for model, tokens in used.items():
        _add(into, model, tokens)
    for child in children:
        await _run_usage(read_run, child, into)


async def missed_tokens(read_run: ReadRun, job_records: list[Recorded], run_ids: list[str]) -> ByModel:
    """What the runs of a job's earlier attempts used that the job was not given,
    per model (empty: nothing missed)."""
    if not run_ids:
        return {}
    return missing_by_model(await used_live(read_run, run_ids), given_by_runs(job_records))
