"""Evals of recorded runs: each re-run as a fork from its start on another model or
prompt, and what changed (`gormes eval runs`, decision 0034).

    sources = await eval_sources(store, run_ids=["01A", "01B"])   # or handler=, status=, since=
    risks = eval_risks(sources, registry)          # ask for --yes when there are any
    report = await eval_runs(store, sources, fork, table, model="scripted:b.json")

`fork(run_id, at)` makes the fork and returns its `ForkedRun`: the CLI passes one
that calls the audited `run.fork` operation, with `at` the source's `run.started`
position, so nothing is copied and the whole run is made again live (the source's
handler and input, the overrides merged in, `model` if given). Each run is then
compared with its re-run, from their recordings:

- status and final answer (the result of `run.completed`, else the error or the
  reason it ended with);
- tools called: the operations of its `run.tool_called` observations, in order,
  one that did not succeed marked with its outcome (`fs.list (denied)`);
- tokens: the run's total as its end records it (its subagents' included);
- cost: every model turn of the run and of its subagents, priced with the pricing
  table (gormes/providers/pricing.py); None when a model has no price.

A run that cannot be re-run (refused: an unknown handler, a changed code path) is
reported with the refusal as its `error`; the others go on. The sources are run
one after another. A filter picks top-level runs that have ended, newest first,
and leaves out forks (name one by id to evaluate it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from gormes.actors.runs.fork_replace import LiveRisk, non_idempotent_operations
from gormes.actors.runs.listing import list_runs
from gormes.actors.runs.recorded import RecordedRun, split_run
from gormes.errors import UserError
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    RUN_TERMINAL,
    RunCancelled,
    RunChildSpawned,
    RunCompleted,
    RunFailed,
    RunLlmCut,
    RunLlmFailed,
    RunLlmTurn,
    RunToolCalled,
    run_stream,
    tokens_of,
)
from gormes.events.store import EventStore

if TYPE_CHECKING:
    from gormes.actors.runs.continuation import ForkedRun
    from gormes.providers.pricing import PricingTable


class EvalRefused(UserError):
    """The runs to evaluate cannot be evaluated as asked; nothing was forked."""


class RunSide(msgspec.Struct, kw_only=True):
    """One run as an eval compares it."""

    run_id: str
    model: str | None
    status: str
    answer: Any = None  # the result of a completed run
    error: str | None = None  # why it did not complete
    tools: list[str] = msgspec.field(default_factory=list)  # "op", or "op (error|denied)"
    tokens: Tokens = Tokens()
    cost: float | None = None


class RunEval(msgspec.Struct, kw_only=True):
    """A recorded run and its re-run; `rerun` is None when it could not be made (`error`)."""

    run_id: str
    original: RunSide
    rerun: RunSide | None = None
    error: str | None = None
    status_changed: bool = False
    answer_changed: bool = False
    tools_changed: bool = False


class EvalReport(msgspec.Struct, kw_only=True):
    model: str | None
    overrides: dict[str, Any]
    runs: list[RunEval]
    changed: int  # re-runs whose status, answer or tools differ
    failed: int  # runs that could not be re-run


async def eval_sources(
    store: EventStore, *, run_ids: Sequence[str] = (), handler: str | None = None, status: str | None = None,
    since: float | None = None, limit: int = 20,
) -> list[RecordedRun]:
    """The recorded runs to evaluate: those named (each must exist and have ended), or
    the newest `limit` top-level ended runs matching the filter (`since`: started at
    or after, epoch seconds), forks left out. EvalRefused when there is none."""
    if run_ids:
        found = []
        for run_id in dict.fromkeys(run_ids):
            records = await store.read_stream(run_stream(run_id))
            if not records:
                raise EvalRefused(f"no run {run_id!r}")
            run = split_run(run_id, records)
            if run.end is None:
                raise EvalRefused(f"run {run_id} has not ended: evaluate it once it has")
            found.append(run)
        return found
    if status is not None and status not in RUN_TERMINAL:
        raise EvalRefused(f"--status {status}: only runs that ended can be re-run "
                          f"(give one of {', '.join(sorted(RUN_TERMINAL))})")
    rows = await list_runs(store, status=status, handler=handler, top_level=True, limit=max(limit * 4, limit))
    found = []
    for row in rows:
        if since is not None and (row["started_at"] or 0) < since:
            break  # newest first: the rest started earlier
        if row["status"] not in RUN_TERMINAL:
            continue
        run = split_run(row["run_id"], await store.read_stream(run_stream(row["run_id"])))
        if run.end is None or run.started.forked_from is not None:
            continue
        found.append(run)
        if len(found) == limit:
            break
    if not found:
        raise EvalRefused("no recorded run matches: nothing to evaluate")
    return found


def check_reruns(sources: Sequence[RecordedRun], manager: Any, model: str | None,
                 overrides: dict[str, Any]) -> None:
    """Refuse, before any re-run and before a confirmation is asked, what a fork of
    one of the runs would refuse as input (continuation.check_rerun: an override
    its handler's input type refuses, a model spec no provider opens; decision 0090)."""
    from gormes.actors.runs.continuation import check_rerun  # lazy: it loads the replayer

    for run in sources:
        try:
            check_rerun(manager, run.started, model, overrides)
        except UserError as exc:
            raise EvalRefused(f"run {run.run_id}: {exc}") from None


def eval_risks(sources: Sequence[RecordedRun], registry: Any) -> list[LiveRisk]:
    """The mutating, non-idempotent operations the re-runs may call, once each."""
    seen: dict[str, LiveRisk] = {}
    for run in sources:
        for risk in non_idempotent_operations(registry, run.started.trust, run.started.tools):
            seen.setdefault(risk.name, risk)
    return [seen[name] for name in sorted(seen)]


async def eval_runs(
    store: EventStore,
    sources: Sequence[RecordedRun],
    fork: Callable[[str, int], Awaitable[ForkedRun]],
    table: PricingTable,
    *,
    model: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> EvalReport:
    """Re-run each source with `fork(run_id, its start's position)` and compare."""
    evals = []
    for source in sources:
        original = await side_of(store, source, table)
        try:
            forked = await fork(source.run_id, source.started_position)
        except UserError as exc:
            evals.append(RunEval(run_id=source.run_id, original=original, error=str(exc)))
            continue
        rerun = await side_of(store, split_run(forked.run_id, await store.read_stream(run_stream(forked.run_id))),
                              table)
        evals.append(compare(source.run_id, original, rerun))
    return EvalReport(
        model=model, overrides=dict(overrides or {}), runs=evals,
        changed=sum(1 for e in evals if e.status_changed or e.answer_changed or e.tools_changed),
        failed=sum(1 for e in evals if e.rerun is None),
    )


def compare(run_id: str, original: RunSide, rerun: RunSide) -> RunEval:
    return RunEval(
        run_id=run_id, original=original, rerun=rerun,
        status_changed=original.status != rerun.status,
        answer_changed=_canonical(original.answer) != _canonical(rerun.answer) or original.error != rerun.error,
        tools_changed=original.tools != rerun.tools,
    )


_encoder = msgspec.json.Encoder(order="sorted")


def _canonical(value: Any) -> bytes:
    return _encoder.encode(value)


async def side_of(store: EventStore, run: RecordedRun, table: PricingTable) -> RunSide:
    """What `run` did and spent (see the module doc), from its recording and its subagents'."""
    end = run.end.event if run.end is not None else None
    status, answer, error, tokens = "running", None, None, Tokens()
    if isinstance(end, RunCompleted):
        status, answer, tokens = "completed", end.result, end.tokens
    elif isinstance(end, RunFailed):
        status, error, tokens = "failed", end.error, end.tokens
    elif isinstance(end, RunCancelled):
        status, error, tokens = "cancelled", end.reason, end.tokens
    tools = [e.operation if e.outcome == "ok" else f"{e.operation} ({e.outcome})"
             for e in (r.event for r in run.observations) if isinstance(e, RunToolCalled)]
    return RunSide(
        run_id=run.run_id, model=run.started.model, status=status, answer=answer, error=error, tools=tools,
        tokens=tokens, cost=table.total(await tree_turns(store, run)),
    )


async def tree_turns(store: EventStore, run: RecordedRun) -> list[tuple[str, Tokens]]:
    """(model, usage) of every model turn of `run` and of the subagents it spawned."""
    turns: list[tuple[str, Tokens]] = []
    pending = [run.records]  # its turns cut short too, which are not observations (decision 0080)
    seen: set[str] = {run.run_id}
    while pending:
        for record in pending.pop():
            event = record.event
            if isinstance(event, RunLlmTurn) or (isinstance(event, (RunLlmFailed, RunLlmCut))
                                                 and event.usage is not None):
                turns.append((event.model, tokens_of(event)))
            elif isinstance(event, RunChildSpawned) and event.child_run_id not in seen:
                seen.add(event.child_run_id)
                records = await store.read_stream(run_stream(event.child_run_id))
                if records:
                    pending.append(split_run(event.child_run_id, records).records)
    return turns
