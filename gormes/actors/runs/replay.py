"""Exact replay: run a recorded run's handler again against its recording.

    with DatabaseRuns(db_path) as source:
        report = await replay(source, run_id, registry=default_registry())  # children too
    report.tree_exact, report.total_events, report.first_divergence

`registry` is the operation registry the recorded run's tools came from (the
caller's: the built-in one, gormes/tools/builtin.py, for what gormes records), so
its tool schemas are what the recording's model requests named. The handler is
looked up by the name recorded in `run.started` in the run-handler registry and
called with the recorded input and a `ReplayContext`
(gormes/actors/runs/replay_context.py), which serves the recorded observations in seq
order, compares each request with the record, and never performs a side effect.
At the end the handler's result (or failure) must equal the recorded
`run.completed` (or `run.failed`); recorded observations the code never asked for
are a divergence too. A handler whose source changed since the recording is
flagged (`handler_version_changed`), which is not by itself a failure.

Children: each `spawn` the parent makes starts the child's own replay (its run id
is in the recorded `run.child_spawned`) in a nursery of the whole tree, so a
child replays from its own recording whatever its parent does; `result()` waits
for it and then serves the parent's recorded `run.child_finished`. With
`children=False` (or when the child's events are not in the source) the parent is
served the recorded outcome alone.

`until`: observations after that log position are not served; each run stops
there and reports its `RunState`.

Every run of the tree is loaded before any handler runs, so a recording that does
not agree with itself anywhere in the tree (`TamperedRecording`) is refused first.

Not built: comparing a replayed child's outcome with the parent's recorded
`run.child_finished` beyond both being exact on their own.
"""

from __future__ import annotations

from typing import Any

import msgspec
import trio

from gormes.actors.runs.replay_context import (
    STOP_DIVERGED,
    STOP_INTERRUPTED,
    STOP_RECORDING_ENDS,
    STOP_REDACTED,
    STOP_UNTIL,
    ReplayContext,
    canonical,
    short,
)
from gormes.actors.runs.recorded import RecordedRun, RunSource, TamperedRecording, UnknownRun
from gormes.actors.runs.replay_report import Divergence, RunReplay, describe, redacted_note
from gormes.actors.runs.context import RunHandlerRegistry, handler_version, run_handlers
from gormes.actors.runs.live import error_text
from gormes.errors import GormesError, UserError
from gormes.events.base import RedactedEvent
from gormes.events.runs import RecordedTool, RunCancelled, RunChildSpawned, RunCompleted, RunFailed, RunStarted
from gormes.ops.registry import Registry
from gormes.ops.spec import OperationContext, OperationSpec, OperationUnavailable

_TERMINAL_TAGS = frozenset(c.__struct_config__.tag for c in (RunCompleted, RunFailed, RunCancelled))  # type: ignore[attr-defined]

__all__ = ["Divergence", "Replayer", "RunReplay", "replay"]


async def replay(
    source: RunSource,
    run_id: str,
    *,
    registry: Registry | None,
    children: bool = True,
    until: int | None = None,
    handlers: RunHandlerRegistry = run_handlers,
) -> RunReplay:
    """Replay one run (and its children) against its recording; see the module doc.

    `registry` is the operation registry the run's tool schemas come from (None:
    no tools, as a run without an executor)."""
    source = CheckedTree(source, run_id, children=children)
    recorded = source.load(run_id)
    if until is not None:
        check_until(recorded, until)
    async with trio.open_nursery() as tree:
        replayer = Replayer(source, tree, children=children, until=until, registry=registry, handlers=handlers)
        await replayer.replay_run(recorded)
    if replayer.errors:
        raise replayer.errors[0]
    return replayer.report(run_id)


class UntilOutsideRun(UserError):
    """`until` names no position of the run: before its start or after its last event."""


def check_until(recorded: RecordedRun, until: int) -> None:
    """Refuse an `until` outside the run's positions, as a fork's `at` is refused
    (decision 0090): taken as the nearest end, it replayed what was not asked for."""
    last = recorded.records[-1].position
    if not recorded.started_position <= until <= last:
        raise UntilOutsideRun(f"--until {until} is not in run {recorded.run_id} (its events are at "
                              f"positions {recorded.started_position}..{last})")


class CheckedTree:
    """A source's runs of one tree (the run, and with `children` its descendants),
    each loaded, and so checked (`split_run`), before anything replays: a tampered
    child is refused up front rather than failing its parent mid-replay."""

    def __init__(self, source: RunSource, run_id: str, *, children: bool = True) -> None:
        self._runs: dict[str, RecordedRun] = {}
        # Each run of a tree is spawned once: a recording whose runs spawn the root,
        # one of their ancestors or a run spawned already (edited by hand) would
        # replay without end, or double at each level, and is refused.
        spawned_by: dict[str, str | None] = {run_id: None}
        pending = [run_id]
        while pending:
            current = pending.pop(0)
            try:
                recorded = source.load(current)
            except UnknownRun:
                if current == run_id:
                    raise
                continue  # a child not in the source: its parent's record serves it
            self._runs[current] = recorded
            if not children:
                continue
            for child in recorded.child_run_ids:
                if child in spawned_by:
                    earlier = spawned_by[child]
                    raise TamperedRecording(
                        f"run {current} spawns run {child}, which "
                        + ("is the run replayed" if earlier is None else f"run {earlier} spawns already")
                        + ": a run of a tree is spawned once, so the recording was edited"
                    )
                spawned_by[child] = current
                pending.append(child)

    def load(self, run_id: str) -> RecordedRun:
        recorded = self._runs.get(run_id)
        if recorded is None:
            raise UnknownRun(f"no run {run_id!r} in the recording")
        return recorded


class Replayer:
    """Replays the runs of one tree; each child's replay runs in `tree`."""

    def __init__(
        self,
        source: RunSource,
        tree: trio.Nursery | None,
        *,
        children: bool = True,
        until: int | None = None,
        registry: Registry | None = None,
        handlers: RunHandlerRegistry = run_handlers,
    ) -> None:
        self.source = source
        self.tree = tree
        self.children = children
        self.until = until
        self.registry = registry
        self.handlers = handlers
        self._reports: dict[str, RunReplay] = {}
        self._spawned: dict[str, list[RunChildSpawned]] = {}
        self.errors: list[GormesError] = []  # a child that could not be replayed at all
        self._with_external: dict[bytes, Registry] = {}

    # -- one run ------------------------------------------------------------------------

    async def replay_run(self, recorded: RecordedRun) -> RunReplay:
        started = recorded.started
        fn = self.handlers.get(started.handler)
        ctx = ReplayContext(recorded, self)
        status, result, error = await self.drive(ctx, fn)
        report = self.judge(ctx, status, result, error)
        report.handler_version_changed = handler_version(fn) != started.handler_version
        if report.handler_version_changed:
            report.notes.append(
                f"handler {started.handler!r} changed since run {started.run_id} was recorded "
                f"(version {started.handler_version[:12]}, now {handler_version(fn)[:12]})"
            )
        self._reports[recorded.run_id] = report
        return report

    def registry_for(self, started: RunStarted) -> Registry | None:
        """The code's registry plus the external tools (an MCP server's) the run
        recorded in `run.started`, rebuilt from the record with a handler that never
        runs: replay serves their calls from the log and starts no server. A recorded
        tool replaces the code's operation of the same name (the run saw the record)."""
        if self.registry is None or not started.external_tools:
            return self.registry
        tools = started.external_tools
        key = msgspec.json.encode(tools)  # the record holds dicts: not hashable itself
        cached = self._with_external.get(key)
        if cached is None:
            names = {t.name for t in tools}
            specs = [s for s in self.registry.list() if s.name not in names]
            cached = self._with_external[key] = Registry([*specs, *(recorded_spec(t) for t in tools)])
        return cached

    @staticmethod
    async def drive(ctx: ReplayContext, fn: Any) -> tuple[str | None, Any, str | None]:
        """Call the handler in its scope, as the live driver does; (None, ...) when the
        replay stopped it."""
        status: str | None = None
        result: Any = None
        error: str | None = None
        with ctx.scope:
            try:
                result = await fn(ctx, ctx.started.input)
                msgspec.json.encode(result)
                status = "completed"
            except (TypeError, msgspec.EncodeError) as exc:
                status, error = "failed", f"run result is not JSON-encodable: {exc}"
            except Exception as exc:  # noqa: BLE001 - the handler's failure is the run's
                status, error = "failed", error_text(exc)
        return status, result, error

    def judge(self, ctx: ReplayContext, status: str | None, result: Any, error: str | None) -> RunReplay:
        """Compare how the handler ended with how the recorded run ended."""
        recorded = ctx.recorded
        served = 1 + ctx.cursor  # run.started and the observations served

        def report(status: Any, exact: bool, events: int = served, **more: Any) -> RunReplay:
            return RunReplay(
                run_id=recorded.run_id, handler=recorded.started.handler, status=status,
                exact=exact, events=events, **more,
            )

        if ctx.stop == STOP_DIVERGED:
            return report("diverged", False, divergence=ctx.divergence)
        if ctx.stop == STOP_REDACTED:
            assert ctx.redacted is not None
            return report("redacted", False, state=ctx.state(), notes=[redacted_note(ctx.redacted)])
        if ctx.stop == STOP_UNTIL:
            return report("stopped", True, state=ctx.state())
        if ctx.stop == STOP_RECORDING_ENDS:
            return report("unfinished", True, state=ctx.state(),
                          notes=["the recording ends here: the run had not ended when it was read"])
        end = recorded.end
        if ctx.stop == STOP_INTERRUPTED:
            assert end is not None
            return report("cancelled" if isinstance(end.event, RunCancelled) else "failed", True, served + 1)
        ended = f"returned {short(result, 60)}" if status == "completed" else f"failed: {short(error or '', 60)}"
        left = ctx.peek()
        if left is not None:
            if self.until is not None and left.position > self.until:
                return report("stopped", True, state=ctx.state())
            return report("diverged", False, divergence=Divergence(
                run_id=ctx.run_id, position=left.position, seq=left.event.seq,  # type: ignore[union-attr]
                recorded=describe(left.event), asked=f"nothing more (the handler {ended})",
            ))
        if end is None:
            gone = next((r for r in recorded.records if isinstance(r.event, RedactedEvent)
                         and r.type in _TERMINAL_TAGS), None)
            if gone is not None:
                return report("redacted", False, notes=[redacted_note(gone)])
            return report(status, True, notes=[f"the recording has no end; the handler {ended}"])
        if self.until is not None and end.position > self.until:
            return report("stopped", True, state=ctx.state())
        event = end.event
        if isinstance(event, RunCancelled):
            return report("cancelled", True, served + 1,
                          notes=[f"recorded as cancelled ({event.reason}) after the handler {ended}"])
        if isinstance(event, RunCompleted) and status == "completed" and canonical(result) == canonical(event.result):
            return report("completed", True, served + 1)
        if isinstance(event, RunFailed) and status == "failed" and error == event.error:
            return report("failed", True, served + 1)
        return report("diverged", False, divergence=Divergence(
            run_id=ctx.run_id, position=end.position, seq=None, recorded=describe(event),
            asked=f"an end where the handler {ended}",
        ))

    # -- children -----------------------------------------------------------------------

    def start_child(self, parent: ReplayContext, spawned: RunChildSpawned) -> trio.Event | None:
        """Start replaying a child in the tree; returns the event set when it ends, or
        None when the child is served from the parent's record instead."""
        self._spawned.setdefault(parent.run_id, []).append(spawned)
        if not self.children or self.tree is None:
            return None
        try:
            recorded = self.source.load(spawned.child_run_id)
        except UnknownRun:
            return None
        done = trio.Event()
        self.tree.start_soon(self._replay_child, recorded, done)
        return done

    async def _replay_child(self, recorded: RecordedRun, done: trio.Event) -> None:
        try:
            await self.replay_run(recorded)
        except GormesError as exc:  # raised once the tree has ended, not as a group
            self.errors.append(exc)
        finally:
            done.set()

    def report(self, run_id: str) -> RunReplay:
        """The run's report with its children's, in the order they were spawned."""
        report = self._reports[run_id]
        for spawned in self._spawned.get(run_id, []):
            child = spawned.child_run_id
            if child in self._reports:
                report.children.append(self.report(child))
            else:
                why = "--no-children" if not self.children else "its events are not in the recording"
                report.children.append(RunReplay(
                    run_id=child, handler=spawned.handler, status="not replayed", exact=True, events=0,
                    notes=[f"served from the parent's record ({why})"],
                ))
        return report


def recorded_spec(tool: RecordedTool) -> OperationSpec:
    """An operation rebuilt from `run.started`'s record of an external tool: the same
    name, description, schema and trust, and a handler that refuses to run."""

    async def not_here(ctx: OperationContext, arguments: dict[str, Any]) -> Any:
        raise OperationUnavailable(f"{tool.name} ({tool.source}) is served from the recording; replay starts no server")

    trust = frozenset(tool.trust)
    return OperationSpec(
        name=tool.name, description=tool.description, input_type=dict, output_type=object, handler=not_here,
        trust=trust, audit_kind="mcp", mutating=True, idempotent=False,
        prompt_visible=trust != frozenset({"operator"}), schema=tool.parameters, source=tool.source,
    )
