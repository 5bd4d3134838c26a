"""Fork: a new run that starts as a copy of another run up to a log position and
then continues live.

    async with RunManager.open(store, executor=executor) as runs:
        forked = await fork_run(runs, "01ABC", at=42, model="openai:gpt-4o-mini",
                                overrides={"max_iterations": 3})
        forked.run_id, forked.outcome

How: the new run's `run.started` is the source's (handler, tools, trust, memory
scope, depth...: an operator's fork of a gateway's run acts for that gateway still)
with a new run id, `forked_from={run_id, position}` and the overrides; then the
SAME handler code runs with a `ForkContext`, a replay-then-live context. While the
source's observations up to the position last, it serves them exactly like a
replay and copies each one into the new run as it is served; after that it hands
every call to a live `LiveRunContext` that continues at the next `seq`. The new
run is therefore replayable exactly like any other.

Before anything is written the code is replayed against the source up to the
position (no children): if it diverges there, the fork is refused.

A fork may replace the one observation AT the position (a model reply, a tool
result or error: `replace=`, gormes/actors/runs/fork_replace.py, decision 0034):
the prefix's last event is swapped for the replacement before it is served and
copied, and `forked_from.replaced` records the original's hash and what stood in.
The `run.fork` operation refuses, unless confirmed (`--yes`), a fork whose live
part may call mutating, non-idempotent operations, and lists them.

With overrides (`model`, input keys) the model requests of the copied prefix
differ from the recorded ones; they are served anyway (that is what a fork with
overrides means: the same history, other parameters from here on) and copied with
the request hash the code produced. Any other mismatch in the prefix fails the
new run with `ForkDiverged`.

The same machinery resumes an agent job's run on a later attempt (`resume_run`,
decision 0011): a new run with `resumed_from` instead of `forked_from`, no
overrides, the earlier run's whole recorded prefix (cut before a child that had
not finished, which the live part resumes in turn when it spawns it again), and
the job's token sink and inbox for the live part.

Not built: forking at a position where a child spawned in the prefix has not
finished by then (refused with a clear message); forking a run that is still
going; copying inbox messages sent but not yet read by the position.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from gormes.actors.runs.child_resumption import ChildResumption
from gormes.actors.runs.tool_resumption import ToolResumption
from gormes.actors.runs.fork_replace import (
    ForkRefused,
    ForkUnconfirmed,
    Replacement,
    non_idempotent_operations,
    replace_observation,
)
from gormes.actors.runs.replay import Replayer, replay
from gormes.actors.runs.replay_context import ReplayContext, handler_cuts
from gormes.actors.runs.recorded import RecordedRun, split_run
from gormes.actors.runs.context import ChildRun, RunContext, handler_version
from gormes.actors.runs.live import LiveRunContext, TokenSink
from gormes.actors.runs.manager import LiveRun, RunManager, RunOutcome
from gormes.actors.runs.start_record import append_start
from gormes.actors.runs.tree_history import prefix_tree_runs
from gormes.errors import UserError
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    ForkOrigin,
    RunCancelled,
    RunChildFinished,
    RunChildSpawned,
    RunCompleted,
    RunInboxRead,
    RunLlmCut,
    RunLlmFailed,
    RunLlmTurn,
    RunMessageSent,
    RunStarted,
    run_stream,
    tokens_of,
)
from gormes.events.store import EventStore
from gormes.ops.spec import narrower

if TYPE_CHECKING:
    from gormes.actors.jobs.context import JobContext
    from gormes.events.audit_seal import Seal
    from gormes.events.base import Recorded


class ForkDiverged(UserError):
    """The forked code asked for something other than the copied prefix."""


class ForkedRun(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    forked_from: ForkOrigin
    copied: int  # observations copied from the source
    outcome: RunOutcome


class _OneRun:
    """A RunSource holding one already-read run."""

    def __init__(self, recorded: RecordedRun) -> None:
        self.recorded = recorded

    def load(self, run_id: str) -> RecordedRun:
        return self.recorded


class ForkContext(ReplayContext):
    """Replay-then-live: serves (and copies) the prefix, then delegates to `live`."""

    copies = True

    def __init__(
        self, prefix: RecordedRun, replayer: Replayer, live: LiveRunContext, store: EventStore, *,
        lenient_llm: bool,
    ) -> None:
        super().__init__(prefix, replayer)
        self.live = live
        self.store = store
        self.stream = run_stream(prefix.run_id)
        self.lenient_llm = lenient_llm

    @property
    def model_name(self) -> str:
        return self.live.model_name or super().model_name

    def llm_matches(self, event: Any, digest: str, request: Any) -> bool:
        if self.lenient_llm:
            return isinstance(event, (RunLlmTurn, RunLlmFailed, RunLlmCut))
        return super().llm_matches(event, digest, request)

    async def exhausted(self, asked: str) -> Recorded | None:
        return None  # the prefix is used up: go live

    def go_live(self) -> RunContext:
        # the live part counts the spawns the prefix served against the run's cap
        self.live.spawns_made = max(self.live.spawns_made, self.spawns_made)
        return self.live

    async def spawn(self, handler: str, input: Any, **options: Any) -> ChildRun:
        if self.cursor >= len(self.recorded.observations):
            # the prefix is used up: the live run's own checks, whose refusals are audited
            return await self.go_live().spawn(handler, input, **options)
        return await super().spawn(handler, input, **options)

    async def diverge(self, position: int, seq: int | None, recorded: str, asked: str) -> None:
        raise ForkDiverged(
            f"fork diverged from the copied run at position {position} (seq {seq}): "
            f"recorded {recorded}, code asked {asked}"
        )

    async def served(self, record: Recorded, event: Any = None) -> None:
        with trio.CancelScope(shield=True):
            await self.store.append(self.stream, [event if event is not None else record.event])


def _children_cap(started: RunStarted, manager: RunManager) -> int | None:
    """The source's cap on spawns; a run recorded before the cap existed had none,
    and its fork or resume, a new run, gets the manager's."""
    return started.max_children if started.max_children is not None else manager.max_children


def _tree_cap(started: RunStarted, manager: RunManager) -> int | None:
    """The source's cap on its tree's runs; a run recorded before the cap existed
    had none, and its fork or resume, a new tree, gets the manager's."""
    return started.max_tree_runs if started.max_tree_runs is not None else manager.max_tree_runs


def apply_overrides(input: Any, overrides: dict[str, Any]) -> Any:
    if not overrides:
        return input
    if not isinstance(input, dict):
        raise ForkRefused(f"--set needs a run whose input is a JSON object, not {type(input).__name__}")
    return {**input, **overrides}


def check_rerun(manager: RunManager, started: RunStarted, model: str | None,
                overrides: dict[str, Any] | None) -> Any:
    """The input a fork of the run `started` begins continues with; refused first
    (decision 0090), before a confirmation is asked and before anything is recorded:
    overrides its handler's input type refuses (`--set tempreature=0.2`) and a model
    spec no provider opens. A fork without overrides keeps its recorded input unchecked."""
    new_input = apply_overrides(started.input, overrides or {})
    if overrides:
        manager.handlers.check_input(started.handler, new_input, "input with --set")
    if model:
        manager.provider(model)
    return new_input


def prefix_of(recorded: RecordedRun, at: int) -> tuple[Recorded, ...]:
    """The observations up to `at`, refusing a cut through a child's life."""
    last = recorded.records[-1].position
    if not recorded.started_position <= at <= last:
        raise ForkRefused(
            f"position {at} is not in run {recorded.run_id} (its events are at "
            f"positions {recorded.started_position}..{last})"
        )
    prefix = tuple(r for r in recorded.observations if r.position <= at)
    finished = {r.event.child_run_id for r in prefix if isinstance(r.event, RunChildFinished)}
    for r in prefix:
        if isinstance(r.event, RunChildSpawned) and r.event.child_run_id not in finished:
            end = next((o.position for o in recorded.observations if isinstance(o.event, RunChildFinished)
                        and o.event.child_run_id == r.event.child_run_id), None)
            after = f" or at/after its end at {end}" if end is not None else ""
            raise ForkRefused(
                f"cannot fork run {recorded.run_id} at {at}: child run {r.event.child_run_id} "
                f"spawned at {r.position} has not finished by then (fork before {r.position}{after})"
            )
    return prefix


async def fork_run(
    manager: RunManager,
    source_run_id: str,
    at: int,
    *,
    model: str | None = None,
    overrides: dict[str, Any] | None = None,
    run_id: str | None = None,
    on_start: Callable[[str], None] | None = None,
    replace: Replacement | None = None,
    confirmed: bool = True,
    seal: Seal | None = None,
) -> ForkedRun:
    """Fork `source_run_id` at `at` and drive the new run to its end; refused, with
    nothing written, when the code no longer replays the prefix. `on_start(new_run_id)`
    is called once the new run's `run.started` is durable, as `resume_run` does;
    `seal`: the audit seal of the call that forks, sealed with it (start_record.py).

    `replace`: the observation AT `at` is served to the fork as this instead of what
    was recorded (fork_replace.py, decision 0034); the fork's `forked_from.replaced`
    says what it replaced. Not `confirmed`: refused (ForkUnconfirmed, listing them)
    when the live part may call mutating, non-idempotent operations (the `run.fork`
    operation passes its `yes`; a library caller has decided)."""
    store = manager.store
    records = await store.read_stream(run_stream(source_run_id))
    source = split_run(source_run_id, records)
    if source.end is None:
        raise ForkRefused(f"run {source_run_id} has not ended: fork it once it has")
    prefix = prefix_of(source, at)
    replaced = None
    if replace is not None:
        if not prefix or prefix[-1].position != at:
            raise ForkRefused(f"position {at} is not an observation of run {source_run_id}: "
                              "give the position of the model reply or tool call to replace")
        event, replaced = replace_observation(prefix[-1], replace)
        prefix = (*prefix[:-1], msgspec.structs.replace(prefix[-1], event=event))
    started = source.started
    new_input = check_rerun(manager, started, model, overrides)
    registry = manager.executor.registry if manager.executor is not None else None
    if not confirmed:
        risks = non_idempotent_operations(registry, source.started.trust, source.started.tools)
        if risks:
            raise ForkUnconfirmed(risks)
    check = await replay(_OneRun(source), source_run_id, children=False, until=at,
                         registry=registry, handlers=manager.handlers)
    if check.divergence is not None:
        raise ForkRefused(f"cannot fork: the code no longer matches run {source_run_id}: {check.divergence.line()}")

    fn = manager.handlers.get(started.handler)
    new_model = model or started.model
    run = LiveRun(
        run_id=run_id or manager.new_id(), handler=started.handler,
        input=new_input, depth=started.depth,
        max_depth=started.max_depth, max_children=_children_cap(started, manager),
        max_tree_runs=_tree_cap(started, manager), trust=started.trust,
        memory_scope=started.scope, tools=started.tools,
        model=new_model, max_iterations=started.max_iterations, deadline_s=started.deadline_s,
        budgets=started.budgets,
    )
    origin = ForkOrigin(run_id=source_run_id, position=at, replaced=replaced)
    outcome = await continue_run(
        manager, run, prefix, run.started_event(handler_version(fn), forked_from=origin, external_tools=manager.external_tools(run)),
        lenient_llm=bool(model or overrides), on_start=on_start, seal=seal, cuts_of=source,
    )
    return ForkedRun(run_id=run.run_id, forked_from=origin, copied=len(prefix), outcome=outcome)


async def continue_run(
    manager: RunManager, run: LiveRun, prefix: tuple[Recorded, ...], started: RunStarted, **options: Any,
) -> RunOutcome:
    """Record `started` (and `messages`, unread inbox messages carried over) on the new
    run's stream, then drive the handler with a `ForkContext`: `prefix` (another run's
    observations) is served and copied, then the run continues live. The prefix's
    tokens count in the run's total but are not sent to `token_sink` again.
    `source`, for a resumed run: the run continued, whose unfinished children the
    live part resumes when it spawns them again (`ChildResumption`). `options` are
    `_continuation`'s."""
    live, ctx = await _continuation(manager, run, prefix, started, **options)
    return await manager.drive(run, ctx, live, manager.handlers.get(run.handler))


async def _continuation(
    manager: RunManager,
    run: LiveRun,
    prefix: tuple[Recorded, ...],
    started: RunStarted,
    *,
    lenient_llm: bool = False,
    messages: tuple[RunMessageSent, ...] = (),
    token_sink: TokenSink | None = None,
    job: JobContext | None = None,
    source: RecordedRun | None = None,
    holding_job: JobContext | None = None,
    on_start: Callable[[str], None] | None = None,
    seal: Seal | None = None,
    cuts_of: RecordedRun | None = None,
) -> tuple[LiveRunContext, ForkContext]:
    """`continue_run` up to driving: `started` recorded (with `seal`, the starting
    call's audit seal, start_record.py), then `on_start(run_id)`, the two contexts made.

    A continuation of `source` acting with a narrower trust class than it recorded
    (decision 0016) may be offered other tools, so its model requests differ from
    the recorded ones: its prefix is then served as recorded (it is history), as a
    fork with overrides serves its own. `cuts_of`: the run whose turns cut by the
    handler's own scope inside the prefix the copy waits at (a fork's source; a
    resumed run's is `source`)."""
    if source is not None and run.trust != source.started.trust:
        lenient_llm = True
    store = manager.store
    registry = manager.executor.registry if manager.executor is not None else None
    provider = manager.provider(run.model) if run.model else None
    tokens = sum((tokens_of(r.event) for r in prefix), Tokens())
    live = LiveRunContext(manager, run, provider, next_seq=len(prefix) + 1, tokens=tokens,
                          token_sink=token_sink, job=job, holding_job=holding_job)
    live.mark_read({m.id for r in prefix if isinstance(r.event, RunInboxRead) for m in r.event.messages})
    # the children the prefix spawned, and theirs, are runs of this run's tree (decision 0063)
    run.tree.add_history(await prefix_tree_runs(store, prefix))
    if source is not None:
        live.child_resumption = ChildResumption.after(source.observations, len(prefix))
        live.tool_resumption = ToolResumption.after(source.observations, len(prefix))
    await append_start(store, run.run_id, [started, *messages], seal)
    if on_start is not None:
        on_start(run.run_id)
    # the turns the handler's own scope cut inside the prefix: the copy waits at them
    # as replay does (decision 0080); they are not copied, and their tokens stay the source's
    last = prefix[-1].position if prefix else 0
    cut_from = cuts_of or source
    cuts = () if cut_from is None else tuple(r for r in handler_cuts(cut_from) if r.position < last)
    copy = RecordedRun(
        run_id=run.run_id, started=started, started_position=0, observations=prefix,
        end=None, records=tuple(sorted((*prefix, *cuts), key=lambda r: r.position)),
    )
    replayer = Replayer(_OneRun(copy), None, children=False, registry=registry, handlers=manager.handlers)
    return live, ForkContext(copy, replayer, live, store, lenient_llm=lenient_llm)


# -- resuming an agent job's run on a later attempt (decision 0011) --------------------


class ResumeRefused(UserError):
    """The earlier run cannot be continued (its code changed, or it has no start)."""


class ResumedRun(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    resumed_from: ForkOrigin
    copied: int  # observations replayed from the earlier run
    outcome: RunOutcome


def resumable_prefix(recorded: RecordedRun) -> tuple[Recorded, ...]:
    """The observations of a run that a continuation takes over (an unfinished run,
    or a completed child): all of them, or those before the first child that was
    spawned and never observed finishing. The parent's observations from that spawn
    on are made again live; when its code spawns that child again, the child is
    itself taken over (a new child run continuing the earlier one, see
    `ChildResumption` and `resumable_run`), or started afresh if it cannot be."""
    finished = {r.event.child_run_id for r in recorded.observations if isinstance(r.event, RunChildFinished)}
    for i, r in enumerate(recorded.observations):
        if isinstance(r.event, RunChildSpawned) and r.event.child_run_id not in finished:
            return recorded.observations[:i]
    return recorded.observations


def carried_messages(recorded: RecordedRun, prefix: tuple[Recorded, ...]) -> tuple[RunMessageSent, ...]:
    """Inbox messages the continuation must still be given: sent to the earlier run
    and not read in `prefix` (read after the cut, or never read), in the order the
    inbox serves them. Messages the earlier run read after the cut came perhaps from
    the job's inbox, which will not serve them again: they are carried too."""
    read = {m.id for r in prefix if isinstance(r.event, RunInboxRead) for m in r.event.messages}
    pending: dict[str, RunMessageSent] = {}
    for r in recorded.records:
        e = r.event
        if isinstance(e, RunMessageSent):
            pending.setdefault(e.message_id, e)
        elif isinstance(e, RunInboxRead):
            for m in e.messages:
                pending.setdefault(m.id, RunMessageSent(
                    message_id=m.id, sender=m.sender, payload=m.payload, sent_at=m.sent_at))
    return tuple(sorted((m for i, m in pending.items() if i not in read), key=lambda m: (m.sent_at, m.message_id)))


class Resumable(msgspec.Struct, frozen=True, kw_only=True):
    """An earlier run a continuation can take over, and what it replays of it."""

    source: RecordedRun
    prefix: tuple[Recorded, ...]
    origin: ForkOrigin


async def _resumable(manager: RunManager, source: RecordedRun, *, completed: bool = False) -> Resumable:
    """Raises ResumeRefused when `source` ended otherwise than cancelled (or, with
    `completed`, completed), or the code no longer replays its prefix (then only a
    fresh start makes sense)."""
    ends = (RunCancelled, RunCompleted) if completed else (RunCancelled,)
    if source.end is not None and not isinstance(source.end.event, ends):
        raise ResumeRefused(f"run {source.run_id} ended {source.end.type}: there is nothing to resume")
    prefix = resumable_prefix(source)
    at = prefix[-1].position if prefix else source.started_position
    registry = manager.executor.registry if manager.executor is not None else None
    check = await replay(_OneRun(source), source.run_id, children=False, until=at,
                         registry=registry, handlers=manager.handlers)
    if check.divergence is not None:
        raise ResumeRefused(f"cannot resume run {source.run_id}: {check.divergence.line()}")
    return Resumable(source=source, prefix=prefix, origin=ForkOrigin(run_id=source.run_id, position=at))


async def resumable_run(manager: RunManager, run_id: str) -> Resumable | None:
    """The earlier child run `run_id`, if a continuation can take it over; None:
    start the child afresh. A child cut off or cancelled is continued; a completed
    one is taken over too (replayed to its end: its work is not done again, even if
    its parent never saw it finish); a failed one is not (a fresh start may succeed
    where it failed)."""
    records = await manager.store.read_stream(run_stream(run_id))
    if not records:
        return None
    try:
        return await _resumable(manager, split_run(run_id, records), completed=True)
    except UserError:  # ResumeRefused, or a recording this gormes cannot read
        return None


async def drive_continuation(
    manager: RunManager, run: LiveRun, resumable: Resumable, token_sink: TokenSink | None,
    holding_job: JobContext | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A subagent run continuing `resumable` (in its parent's nursery, as
    `RunManager._new_run` starts a fresh one): started once `run.started` is durable."""
    fn = manager.handlers.get(run.handler)
    source, prefix = resumable.source, resumable.prefix
    live, ctx = await _continuation(
        manager, run, prefix, run.started_event(handler_version(fn), resumed_from=resumable.origin, external_tools=manager.external_tools(run)),
        messages=carried_messages(source, prefix), token_sink=token_sink, source=source,
        holding_job=holding_job,
    )
    task_status.started()
    await manager.drive(run, ctx, live, fn)


async def resume_run(
    manager: RunManager,
    source: RecordedRun,
    *,
    run_id: str | None = None,
    job_id: str | None = None,
    token_sink: TokenSink | None = None,
    job: JobContext | None = None,
    outside_reason: Callable[[], str | None] | None = None,
    on_start: Callable[[str], None] | None = None,
    trust: str | None = None,
    memory_scope: str | None = None,
    seal: Seal | None = None,
) -> ResumedRun:
    """Continue `source`, a run that did not complete (cancelled, or cut off with no
    end), as a new run with `resumed_from`: the same handler, input and options; its
    recorded prefix (see `resumable_prefix`) is replayed, not redone, then the run
    goes live, resuming the unfinished children it spawns again. Refused, with
    nothing written, when the code no longer replays the prefix (then only a fresh
    start makes sense). `on_start(new_run_id)` is called once the new run's
    `run.started` is durable; `seal`: the audit seal of the call that resumes, sealed
    with it (start_record.py).
    The new run acts with the source's trust and memory scope, or, given `trust`,
    the narrower of the two classes (and `memory_scope` instead of the source's):
    a job's next attempt acts for the job's submitter (decision 0016); see
    `_continuation` for a prefix recorded with a wider class."""
    resumable = await _resumable(manager, source)
    prefix, origin = resumable.prefix, resumable.origin
    started = source.started
    fn = manager.handlers.get(started.handler)
    run_id = run_id or manager.new_id()
    run = LiveRun(
        run_id=run_id, handler=started.handler, input=started.input,
        depth=started.depth, max_depth=started.max_depth, max_children=_children_cap(started, manager),
        max_tree_runs=_tree_cap(started, manager),
        trust=started.trust if trust is None else narrower(started.trust, trust),
        memory_scope=started.scope if trust is None else memory_scope, tools=started.tools,
        model=started.model, max_iterations=started.max_iterations, deadline_s=started.deadline_s,
        job_id=job_id if job_id is not None else started.job_id, outside_reason=outside_reason,
        budgets=started.budgets,
    )
    outcome = await continue_run(
        manager, run, prefix, run.started_event(handler_version(fn), resumed_from=origin, external_tools=manager.external_tools(run)),
        messages=carried_messages(source, prefix), token_sink=token_sink, job=job, source=source,
        on_start=on_start, seal=seal,
    )
    return ResumedRun(run_id=run.run_id, resumed_from=origin, copied=len(prefix), outcome=outcome)
