"""Runs: a handler driven on its own stream `run-<id>`, with a deadline, a cancel
scope and a nursery for its subagents.

    async with RunManager.open(store, executor=executor) as runs:
        handle = await runs.start("agent", {"prompt": "..."}, model="scripted:demo.json")
        outcome = await handle.outcome()   # RunOutcome(status, result, error, tokens)

Supervision is the nursery tree: a child run lives in its parent's children
nursery, inside the parent's cancel scope, so cancelling a run (or its deadline
passing) cancels its subagents, and a parent that returns cancels the children it
never awaited. Each run ends with exactly one terminal event: `run.completed`,
`run.failed` (the handler raised, the deadline passed, max iterations...) or
`run.cancelled`.
"""

from __future__ import annotations

import os
import random as _random
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import trio

from gormes.actors.jobs.session import new_id
from gormes.actors.runs import collector
from gormes.actors.runs.actor import RUN, RunNotFound, SendMessage
from gormes.actors.runs.approvals import ApprovalGate, ApprovalPolicy
from gormes.actors.runs.context import (
    DEFAULT_MAX_CHILDREN,
    DEFAULT_MAX_DEPTH,
    MAX_CHILDREN_ENV,
    RunContext,
    RunHandler,
    RunHandlerRegistry,
    handler_version,
    run_handler,
    run_handlers,
)
from gormes.actors.runs.live import CHILD_TRUST, LiveRunContext, TokenSink, error_text
from gormes.actors.runs.process import this_process
from gormes.actors.runs.start_record import append_start
from gormes.actors.runs.tree_cap import DEFAULT_MAX_TREE_RUNS, MAX_TREE_RUNS_ENV, TreeCount
from gormes.actors.runtime import ask
from gormes.control.budgets import BudgetMeter, applicable
from gormes.control.rate_limits import ProviderLimits
from gormes.errors import UserError
from gormes.events.base import Event
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    TERMINAL_TYPES,
    ForkOrigin,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RecordedTool,
    RunStarted,
    run_stream,
)
from gormes.events.store import EventStore, Transaction
from gormes.ops.input_text import surrogate_text
from gormes.ops.spec import narrower
from gormes.providers import open_provider
from gormes.providers.config import model_retries
from gormes.settings import count_setting

if TYPE_CHECKING:
    from gormes.actors.jobs.context import JobContext
    from gormes.events.audit_seal import Seal
    from gormes.providers.base import Provider
    from gormes.ops.executor import Executor

__all__ = [
    "LiveRun", "RunHandle", "RunManager", "RunNotFound", "RunOutcome", "run_handler",
    "run_handlers", "send_message",
]

DEADLINE_EXCEEDED = "deadline exceeded"
_END_TAGS = tuple(cls.__struct_config__.tag for cls in TERMINAL_TYPES)


class RunOutcome(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    status: Literal["completed", "failed", "cancelled"]
    result: Any = None
    error: str | None = None
    tokens: Tokens = Tokens()  # the run's total, its awaited children's included


@dataclass(eq=False)
class LiveRun:
    """A run in memory: what `run.started` says, its cancel scope and its end."""

    run_id: str
    handler: str
    input: Any
    depth: int = 0
    max_depth: int = DEFAULT_MAX_DEPTH
    max_children: int | None = DEFAULT_MAX_CHILDREN
    max_tree_runs: int | None = DEFAULT_MAX_TREE_RUNS  # a subagent's is its tree's
    trust: str = "operator"
    # The memory scope its tool calls are pinned to (`run.started`'s `scope`; the
    # name `scope` is the cancel scope's, below).
    memory_scope: str | None = None
    tools: tuple[str, ...] | None = None
    model: str | None = None
    max_iterations: int | None = None
    deadline_s: float | None = None
    job_id: str | None = None
    # The budgets its model turns are charged to (`run.started`'s `budgets`): a
    # subagent's, resume's and fork's are its source's, so none escapes them.
    budgets: tuple[str, ...] = ()
    parent: LiveRun | None = None
    # Why a top-level run was cancelled from outside (a job's abort reason), if known.
    outside_reason: Callable[[], str | None] | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    cancel_reason: str | None = None
    done: trio.Event = field(default_factory=trio.Event)
    outcome: RunOutcome | None = None
    # The runs its tree holds (tree_cap.py): a subagent shares its parent's count, a
    # root starts one.
    tree: TreeCount = field(init=False)

    def __post_init__(self) -> None:
        self.tree = self.parent.tree if self.parent is not None else TreeCount(self.run_id, self.max_tree_runs)

    @property
    def parent_run_id(self) -> str | None:
        return self.parent.run_id if self.parent is not None else None

    def cancel(self, reason: str = "cancelled") -> None:
        if self.cancel_reason is None and not self.done.is_set():
            self.cancel_reason = reason
            self.scope.cancel()

    def outside_abort(self) -> str | None:
        """Why the job running this run's tree is being aborted (paused, lease lost,
        shut down), if it is."""
        root = self
        while root.parent is not None:
            root = root.parent
        return root.outside_reason() if root.outside_reason is not None else None

    def why_cancelled_from_outside(self) -> str:
        parent = self.parent
        if parent is None:
            known = self.outside_reason() if self.outside_reason is not None else None
            return known or "runtime closed"
        if parent.cancel_reason is not None:
            return f"parent run cancelled: {parent.cancel_reason}"
        if parent.scope.deadline <= trio.current_time():
            return "parent run's deadline exceeded"
        return "parent run ended"

    def started_event(
        self, version: str, forked_from: ForkOrigin | None = None, resumed_from: ForkOrigin | None = None,
        external_tools: tuple[RecordedTool, ...] = (),
    ) -> RunStarted:
        return RunStarted(
            run_id=self.run_id, handler=self.handler, handler_version=version, input=self.input,
            parent_run_id=self.parent_run_id, depth=self.depth, deadline_s=self.deadline_s,
            tools=self.tools, model=self.model, max_iterations=self.max_iterations,
            trust=self.trust, job_id=self.job_id, forked_from=forked_from, max_depth=self.max_depth,
            max_children=self.max_children, max_tree_runs=self.max_tree_runs,
            resumed_from=resumed_from, process=this_process(), scope=self.memory_scope,
            external_tools=external_tools, budgets=self.budgets,
        )


class RunHandle:
    def __init__(self, manager: RunManager, run: LiveRun) -> None:
        self._manager = manager
        self.run = run

    @property
    def run_id(self) -> str:
        return self.run.run_id

    async def outcome(self) -> RunOutcome:
        await self.run.done.wait()
        assert self.run.outcome is not None
        return self.run.outcome

    def cancel(self, reason: str = "cancelled") -> None:
        self.run.cancel(reason)

    async def send(self, payload: Any, sender: str = "operator") -> str:
        return await self._manager.send(self.run_id, payload, sender=sender)


class RunManager:
    """Starts runs in a nursery of its own and drives them to their terminal event."""

    def __init__(
        self,
        store: EventStore,
        nursery: trio.Nursery,
        *,
        executor: Executor | None = None,
        handlers: RunHandlerRegistry = run_handlers,
        providers: Callable[[str], Provider] | None = None,
        clock: Callable[[], float] = time.time,
        random: Callable[[], float] = _random.random,
        ids: Callable[[], str] = new_id,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_children: int | None = None,  # None: GORMES_MAX_CHILDREN, else 100
        max_tree_runs: int | None = None,  # None: GORMES_MAX_TREE_RUNS, else 10,101 (tree_cap.py)
        llm_retries: int | None = None,  # None: GORMES_MODEL_RETRIES, else 3
        llm_backoff_s: float = 0.2,
        provider_limits: ProviderLimits | None = None,  # None: GORMES_RATE_LIMITS, GORMES_OUTAGE_AFTER
        budgets: BudgetMeter | None = None,
        approvals: ApprovalPolicy | None = None,  # None: GORMES_REQUIRE_APPROVAL... (approvals.py)
    ) -> None:
        self.store = store
        self.executor = executor
        self.handlers = handlers
        self.clock = clock
        self.random = random
        self.new_id = ids
        self.max_depth = max_depth
        self.max_children = count_setting(max_children, "max_children", os.environ, MAX_CHILDREN_ENV,
                                          DEFAULT_MAX_CHILDREN)
        self.max_tree_runs = count_setting(max_tree_runs, "max_tree_runs", os.environ, MAX_TREE_RUNS_ENV,
                                           DEFAULT_MAX_TREE_RUNS)
        self.llm_retries = model_retries(llm_retries, os.environ)
        self.llm_backoff_s = llm_backoff_s
        # rate limits, shared back-off, outage guard: asked around each model request
        self.provider_limits = provider_limits or ProviderLimits.from_env(store, os.environ)
        self.budgets = budgets or BudgetMeter(store, clock=clock)  # reserve before, settle after a turn
        # the gate of tool calls that need a person's approval (decision 0033)
        self.approvals = ApprovalGate(store, approvals or ApprovalPolicy.from_env(os.environ), clock=clock, ids=ids)
        self._nursery = nursery
        self._open_provider = providers
        self._providers: dict[str, Provider] = {}
        self.live: dict[str, LiveRun] = {}

    @classmethod
    @asynccontextmanager
    async def open(cls, store: EventStore, **options: Any) -> AsyncIterator[RunManager]:
        """Runs still going when the block ends are cancelled (`run.cancelled`)."""
        # The body's exception is re-raised outside the nursery, as itself (not in
        # an ExceptionGroup), like SQLiteEventStore.open does.
        body_error: BaseException | None = None
        async with trio.open_nursery() as nursery:
            manager = cls(store, nursery, **options)
            try:
                yield manager
            except BaseException as exc:  # noqa: BLE001 - re-raised below, as itself
                body_error = exc
            finally:
                nursery.cancel_scope.cancel()
        if body_error is not None:
            raise body_error

    def provider(self, spec: str) -> Provider:
        """One provider per spec for the manager's life (opening it checks the spec)."""
        provider = self._providers.get(spec)
        if provider is None:
            if self._open_provider is None:
                self._open_provider = open_provider
            provider = self._providers[spec] = self._open_provider(spec)
        return provider

    # -- starting ------------------------------------------------------------------------

    async def start(
        self,
        handler: str,
        input: Any = None,
        *,
        model: str | None = None,
        tools: tuple[str, ...] | list[str] | None = None,
        max_iterations: int | None = None,
        deadline_s: float | None = None,
        trust: str = "operator",
        memory_scope: str | None = None,
        job_id: str | None = None,
        run_id: str | None = None,
        max_depth: int | None = None,
        token_sink: TokenSink | None = None,
        job: JobContext | None = None,
        outside_reason: Callable[[], str | None] | None = None,
        budget: str | None = None,
        seal: Seal | None = None,
    ) -> RunHandle:
        """Start a top-level run; returns once `run.started` is durable. An unknown
        handler, a bad model spec or input that is not JSON raise before anything
        is recorded. `trust` and `memory_scope`: the class and memory scope its tool
        calls are made with (its submitter's, decision 0016). `budget`: a budget
        its tree is charged to, besides `job:<job_id>` and `scope:<memory_scope>`
        if they exist (decision 0030); an unknown one raises before anything is recorded.
        `seal`: the audit seal of the call that starts it, sealed with `run.started`
        (start_record.py)."""
        fn = self.handlers.get(handler)
        if not model and self.handlers.needs_model(handler):
            raise UserError(f"run handler {handler!r} needs a model: give one (scripted:PATH, "
                            "openai:MODEL or anthropic:MODEL)")
        provider = self.provider(model) if model else None
        _require_json(input, "run input")
        # a job's parent is fixed when it is submitted: a tree's top has no ancestors to look up
        top_job = job is not None and job.id == job_id and job.parent_id is None
        with _in_flight_from_here():
            budgets = await applicable(self.store, budget, job_id=job_id, scope=memory_scope,
                                       job_has_parent=not top_job, trust=trust)
            run = LiveRun(
                run_id=run_id or self.new_id(), handler=handler, input=input, trust=trust,
                memory_scope=memory_scope, tools=None if tools is None else tuple(tools), model=model,
                max_iterations=max_iterations, deadline_s=deadline_s, job_id=job_id,
                max_depth=self.max_depth if max_depth is None else max_depth, max_children=self.max_children,
                max_tree_runs=self.max_tree_runs, outside_reason=outside_reason, budgets=budgets,
            )
            ctx = LiveRunContext(self, run, provider, token_sink=token_sink, job=job)
            await self._nursery.start(self._new_run, run, ctx, fn, seal)
        return RunHandle(self, run)

    async def run(self, handler: str, input: Any = None, **options: Any) -> RunOutcome:
        """Start a run and wait for its outcome."""
        handle = await self.start(handler, input, **options)
        return await handle.outcome()

    async def start_child(
        self, parent: LiveRunContext, *, run_id: str, handler: str, input: Any,
        tools: tuple[str, ...], model: str | None, deadline_s: float | None, resume: Any = None,
    ) -> LiveRun:
        """Start a subagent run in `parent`'s nursery (what `parent.spawn` asks of
        its manager); returns once `run.started` is durable. `resume` (a
        `fork.Resumable`): the child continues that earlier run. The child's trust
        is the narrower of its parent's and CHILD_TRUST, and it keeps its parent's
        memory scope: never wider than the parent. It keeps its parent's
        `max_iterations` too (a handler's input may ask for fewer, never more)."""
        parent_run = self.live[parent.run_id]
        fn = self.handlers.get(handler)
        run = LiveRun(
            run_id=run_id, handler=handler, input=input, depth=parent.depth + 1,
            max_depth=parent.max_depth, max_children=parent_run.max_children,
            max_tree_runs=parent_run.max_tree_runs, trust=narrower(parent_run.trust, CHILD_TRUST),
            memory_scope=parent_run.memory_scope, tools=tools, model=model,
            max_iterations=parent_run.max_iterations, deadline_s=deadline_s, job_id=parent_run.job_id,
            parent=parent_run,
            budgets=parent_run.budgets,
        )
        assert parent.children_nursery is not None
        if resume is not None:
            from gormes.actors.runs.continuation import drive_continuation

            await parent.children_nursery.start(
                drive_continuation, self, run, resume, parent.token_sink, parent.holding_job)
            return run
        provider = self.provider(model) if model else None
        ctx = LiveRunContext(self, run, provider, token_sink=parent.token_sink, holding_job=parent.holding_job)
        with _in_flight_from_here():
            await parent.children_nursery.start(self._new_run, run, ctx, fn)
        return run

    async def _new_run(
        self, run: LiveRun, ctx: LiveRunContext, fn: RunHandler, seal: Seal | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        started = run.started_event(handler_version(fn), external_tools=self.external_tools(run))
        await append_start(self.store, run.run_id, [started], seal)
        task_status.started()
        # The start's bookkeeping (its nursery, cancel scope, status) is not kept alive by
        # this frame for the run's life: ten thousand runs' worth the collector walks.
        del task_status
        await self.drive(run, ctx, ctx, fn, counted=True)

    def external_tools(self, run: LiveRun) -> tuple[RecordedTool, ...]:
        """The tools not in the code (an MCP server's: a spec with a `source`) that
        `run` may offer its model, as `run.started` records them for replay."""
        executor = self.executor
        if executor is None:
            return ()
        registry = executor.registry

        def build() -> tuple[RecordedTool, ...]:
            tools = []
            for schema in registry.tool_schemas(run.trust, run.tools):
                spec = registry.get(schema.name)
                if spec is not None and spec.source is not None:
                    tools.append(RecordedTool(
                        name=spec.name, description=spec.description, parameters=schema.parameters,
                        trust=tuple(sorted(spec.trust)), source=spec.source,
                    ))
            return tuple(tools)

        return registry.derived(("external_tools", run.trust, run.tools), build)

    # -- driving -------------------------------------------------------------------------

    async def drive(
        self, run: LiveRun, ctx: RunContext, live: LiveRunContext, fn: RunHandler, *, counted: bool = False,
    ) -> RunOutcome:
        """Run `fn(ctx, input)` in the run's scope and record its terminal event.

        `ctx` is usually `live`; a fork or resume passes a context that serves the
        recorded prefix first and then delegates to `live` (which must have been
        made with the matching `next_seq`, see `attach`). `counted`: the run is
        already counted in flight (`_in_flight_from_here`); it stops counting here,
        once the run's end is written: ten thousand runs that end together wait for
        that commit together, their state alive (decision 0044).
        """
        if not counted:
            collector.run_started()
        try:
            return await self._drive(run, ctx, live, fn)
        finally:
            collector.run_ended()

    async def _drive(self, run: LiveRun, ctx: RunContext, live: LiveRunContext, fn: RunHandler) -> RunOutcome:
        self.live[run.run_id] = run
        status: str | None = None
        result: Any = None
        error: str | None = None
        try:
            with run.scope:
                if run.deadline_s is not None:
                    run.scope.deadline = trio.current_time() + run.deadline_s
                async with trio.open_nursery() as children:
                    live.children_nursery = children
                    try:
                        result = await fn(ctx, run.input)
                        _require_json(result, "run result")
                        status = "completed"
                    except Exception as exc:  # noqa: BLE001 - the handler's failure is the run's
                        aborted = run.outside_abort()
                        # Raised because the job is being aborted (a fenced write refused
                        # after a pause or a lost lease): the job's abort, as a cancellation
                        # would be, so that the next attempt resumes the run.
                        if aborted is not None:
                            status, error = "cancelled", aborted
                        else:
                            status, error = "failed", error_text(exc)
                    children.cancel_scope.cancel()  # children never awaited end with the parent
        except BaseException as exc:
            # Cancelled from outside (possibly grouped by a nursery), or a bug of ours.
            if _only_cancelled(exc):
                ending, why = "cancelled", run.cancel_reason or run.why_cancelled_from_outside()
            else:
                ending, why = "failed", error_text(exc)
            with trio.CancelScope(shield=True):
                await self._finish(run, live, ending, None, why)
            raise
        finally:
            self.live.pop(run.run_id, None)
        if status is None:
            if run.cancel_reason is not None:
                status, error = "cancelled", run.cancel_reason
            else:
                status, error = "failed", DEADLINE_EXCEEDED
        with trio.CancelScope(shield=True):
            return await self._finish(run, live, status, result, error)

    async def _finish(
        self, run: LiveRun, live: LiveRunContext, status: str, result: Any, error: str | None
    ) -> RunOutcome:
        tokens = live.total_tokens
        event: Event
        if status == "completed":
            event = RunCompleted(result=result, tokens=tokens)
        elif status == "failed":
            event = RunFailed(error=error or "failed", tokens=tokens)
        else:
            event = RunCancelled(reason=error or "cancelled", tokens=tokens)
        stream = run_stream(run.run_id)

        def record_end(tx: Transaction) -> None:
            # Unless the run has an end already: a later attempt of its job recorded
            # it as cut off while this process was frozen (gormes/actors/agent_jobs/cut_off.py).
            version = tx.stream_version(stream)
            # the last event, only if it is an end: the last turn's record is not decoded
            if not (version and tx.read_stream(stream, version - 1, _END_TAGS)):
                tx.append(stream, [event], version)

        await self.store.transact(record_end)
        run.outcome = RunOutcome(
            run_id=run.run_id, status=status, result=result, error=error, tokens=tokens,  # type: ignore[arg-type]
        )
        run.done.set()
        return run.outcome

    # -- from outside --------------------------------------------------------------------

    def cancel(self, run_id: str, reason: str = "cancelled") -> bool:
        """Cancel a run running in this process (and its children); False if none."""
        run = self.live.get(run_id)
        if run is None:
            return False
        run.cancel(reason)
        return True

    def cancel_all(self, reason: str) -> int:
        """Cancel every top-level run running in this process (their children with
        them); how many were cancelled."""
        top = [run for run in self.live.values() if run.parent is None]
        for run in top:
            run.cancel(reason)
        return len(top)

    async def send(self, run_id: str, payload: Any, *, sender: str = "operator") -> str:
        return await send_message(self.store, run_id, payload, sender=sender, clock=self.clock, ids=self.new_id)


@contextmanager
def _in_flight_from_here() -> Iterator[None]:
    """Count a run in flight (gormes/actors/runs/collector.py) from the start of its
    start: ten thousand runs started at once allocate their state and then wait for
    their `run.started` together, and counted only from `drive` on they did so under
    the narrow thresholds, in seven full collections (0.4 s of a 13 s case, decision
    0043). The count is `drive`'s to end once the run reached it (`counted=True`);
    a start that fails or is cancelled before ends it here."""
    collector.run_started()
    try:
        yield
    except BaseException:
        collector.run_ended()
        raise


def _only_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancelled(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


def _require_json(value: Any, what: str) -> None:
    try:
        msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError) as exc:
        raise UserError(f"{what} is not JSON-encodable: {exc}") from None
    except UnicodeEncodeError:  # a lone surrogate in a str (decision 0077)
        raise UserError(f"{what} is not JSON-encodable: {surrogate_text(value, what)}") from None


async def send_message(
    store: EventStore, run_id: str, payload: Any, *, sender: str = "operator",
    clock: Callable[[], float] = time.time, ids: Callable[[], str] = new_id,
    max_unread_bytes: int | None = None,
) -> str:
    """Put a message in a run's inbox (`run.message_sent` on its stream) and return its
    id; the run reads it at its next `ctx.inbox()`. Refused for an unknown or ended run,
    and (`InboxFull`) when the run's unread messages with it would pass `max_unread_bytes`
    of JSON (counted in the transaction that appends it)."""
    _require_json(payload, "message payload")
    message_id = ids()
    await ask(store, RUN, run_id, SendMessage(
        run_id=run_id, message_id=message_id, sender=sender, payload=payload,
        sent_at=int(clock() * 1000), max_unread_bytes=max_unread_bytes,
    ))
    return message_id
