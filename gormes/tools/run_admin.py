"""The operator's foreground runs: run.start, run.fork and run.resume.

Operator-only and never offered to models: `gormes run`, `gormes fork` and
`gormes runs resume` start their runs through these, so starting, forking or
resuming a run is audited (`run.write`) like every other state change (decision
0019); a refusal (an unknown handler, a bad model spec, a run that may not be
forked or resumed) is audited with it, as `invalid`.

Each handler only STARTS the run, on the caller's `RunStarter`, and returns its
id once the run's `run.started` is durable, the call's audit record sealed into
that transaction (gormes/actors/runs/start_record.py). The run goes on after the
call (its own tool calls audited as always), and the command waits for it with
`RunStarter.result`. The operation's timeout bounds
the checks before the start (a fork's or resume's replay of the prefix), never
the run. Trust does not widen: a started run acts as the caller (the operator);
a fork or a resume keeps its source's trust class and memory scope (decision 0016).

run.fork may replace the observation at its position (`reply`, `tool_result`,
`tool_error`) and, without `yes`, refuses a fork whose live part may call mutating,
non-idempotent operations, listing them (decision 0034, gormes/actors/runs/fork_replace.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import msgspec
import trio

from gormes.actors.runs.fork_replace import (
    ForkRefused,
    GivenReply,
    Replacement,
    reply_replacement,
    tool_error_replacement,
    tool_result_replacement,
)
from gormes.events.audit_seal import take_seal
from gormes.ops.spec import OperationContext, OperationSpec, OperationUnavailable
from gormes.ops.tool_names import check_tools

OPERATOR = frozenset({"operator"})

RunIdText = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
ModelSpec = Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]


class RunStarter:
    """The caller's RunManager, and the nursery a fork or a resume is driven in
    (they are driven to their end by one call, unlike `RunManager.start`): it
    outlives the operation call. Keeps what each started run ends with until the
    caller asks for it with `result`."""

    def __init__(self, manager: Any, nursery: trio.Nursery) -> None:
        self.manager = manager
        self._nursery = nursery
        self._results: dict[str, Callable[[], Awaitable[Any]]] = {}

    def started(self, run_id: str, result: Callable[[], Awaitable[Any]]) -> None:
        self._results[run_id] = result

    async def launch(self, drive: Callable[[Callable[[str], None]], Awaitable[Any]]) -> str:
        """Run `drive(on_start)` in the nursery; return the new run's id once it calls
        `on_start(run_id)` (every check passed, the run started). An error before that is raised here,
        as itself (and nothing was started); one after is `result`'s."""
        ended = trio.Event()
        outcome: list[Any] = []
        failure: list[BaseException] = []

        async def task(task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
            begun = False

            def on_start(run_id: str) -> None:
                nonlocal begun
                begun = True
                task_status.started(run_id)

            try:
                outcome.append(await drive(on_start))
            except Exception as exc:
                if not begun:
                    raise
                failure.append(exc)
            finally:
                ended.set()

        async def result() -> Any:
            await ended.wait()
            if failure:
                raise failure[0]
            return outcome[0]

        run_id: str = await self._nursery.start(task)
        self.started(run_id, result)
        return run_id

    async def result(self, run_id: str) -> Any:
        """What run `run_id`, started through this starter, ended with: a
        RunOutcome (run.start), a ForkedRun (run.fork) or a ResumedRun (run.resume)."""
        return await self._results.pop(run_id)()


def run_starter(ctx: OperationContext) -> RunStarter:
    if not isinstance(ctx.runs, RunStarter):
        raise OperationUnavailable("no run manager is configured here: the run operations are off")
    return ctx.runs


class RunStartInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Start a run of `handler` ("agent": the built-in agent loop) with `input`."""

    handler: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    input: Any = None
    model: ModelSpec | None = None
    tools: list[Annotated[str, msgspec.Meta(max_length=200)]] | None = None
    max_iterations: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] | None = None
    deadline_s: Annotated[float, msgspec.Meta(gt=0, le=10**9)] | None = None


class RunForkInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Fork run `run_id` at log position `at`: its events up to there copied into a
    new run, continued live (with `model`, and `overrides` merged into its input).
    At most one of `reply` (a reply, or a text-only reply's text), `tool_result`
    (JSON text) and `tool_error` replaces the observation AT `at` (decision 0034).
    Without `yes`, a fork whose live part may call mutating, non-idempotent
    operations is refused, listing them."""

    run_id: RunIdText
    at: Annotated[int, msgspec.Meta(ge=1, le=2**53)]
    model: ModelSpec | None = None
    overrides: dict[str, Any] = msgspec.field(default_factory=dict)
    reply: GivenReply | str | None = None
    tool_result: str | None = None
    tool_error: str | None = None
    yes: bool = False


class RunResumeInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Resume run `run_id`, an interrupted foreground run (`force`: its process,
    which cannot be checked from here, is declared gone)."""

    run_id: RunIdText
    force: bool = False


class StartedRun(msgspec.Struct, kw_only=True):
    run_id: str


async def run_start(ctx: OperationContext, value: RunStartInput) -> StartedRun:
    starter = run_starter(ctx)
    executor = starter.manager.executor
    if executor is not None:  # the tools its runs may call: a name none of them has is refused
        check_tools(value.tools, (spec.name for spec in executor.registry.list()), "tools")
    handle = await starter.manager.start(
        value.handler, value.input, model=value.model, tools=value.tools,
        max_iterations=value.max_iterations, deadline_s=value.deadline_s,
        trust=ctx.caller.trust, memory_scope=ctx.caller.scope, seal=take_seal(),
    )
    starter.started(handle.run_id, handle.outcome)
    return StartedRun(run_id=handle.run_id)


async def run_fork(ctx: OperationContext, value: RunForkInput) -> StartedRun:
    # Lazy for start-up time: loaded on first use, not with the registry.
    from gormes.actors.runs.continuation import fork_run

    starter = run_starter(ctx)
    replace = fork_replacement(value)
    seal = take_seal()  # here: the fork is driven in a task of its own
    run_id = await starter.launch(lambda on_start: fork_run(
        starter.manager, value.run_id, value.at, model=value.model, overrides=value.overrides,
        on_start=on_start, replace=replace, confirmed=value.yes, seal=seal,
    ))
    return StartedRun(run_id=run_id)


def fork_replacement(value: RunForkInput) -> Replacement | None:
    """The `Replacement` a fork's input asks for, or None; more than one is refused."""
    given = [name for name in ("reply", "tool_result", "tool_error") if getattr(value, name) is not None]
    if len(given) > 1:
        raise ForkRefused(f"give one replacement, not {' and '.join('--' + g.replace('_', '-') for g in given)}")
    if value.reply is not None:
        return reply_replacement(value.reply)
    if value.tool_result is not None:
        return tool_result_replacement(value.tool_result)
    if value.tool_error is not None:
        return tool_error_replacement(value.tool_error)
    return None


async def run_resume(ctx: OperationContext, value: RunResumeInput) -> StartedRun:
    # Lazy for start-up time: loaded on first use, not with the registry.
    from gormes.actors.runs.resume import resume_from_outside

    starter = run_starter(ctx)
    seal = take_seal()  # here: the resumed run is driven in a task of its own
    run_id = await starter.launch(lambda on_start: resume_from_outside(
        starter.manager, value.run_id, force=value.force, on_start=on_start, seal=seal,
    ))
    return StartedRun(run_id=run_id)


def _spec(name: str, description: str, input_type: type, handler: Any) -> OperationSpec:
    return OperationSpec(
        name=name, description=description, input_type=input_type, output_type=StartedRun,
        handler=handler, trust=OPERATOR, audit_kind="run.write", mutating=True, idempotent=False,
        timeout=120.0,
    )


SPECS = (
    _spec("run.start", "Start a run in this process (gormes run); returns its id at once.",
          RunStartInput, run_start),
    _spec("run.fork", "Fork a run at a log position into a new run continued live (gormes fork).",
          RunForkInput, run_fork),
    _spec("run.resume", "Resume an interrupted foreground run as a new run (gormes runs resume).",
          RunResumeInput, run_resume),
)
