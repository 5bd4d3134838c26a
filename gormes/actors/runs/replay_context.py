"""`ReplayContext`: the `RunContext` that serves a recorded run back to its handler.

Each call the handler makes is matched with the next recorded observation (by
`seq`) and checked against it:

    llm(request)      run.llm_turn / run.llm_failed: same request hash and model (a turn
                      the handler's own scope cut short, `run.llm_cut`, and the run
                      went on: the call waits there for that scope, decision 0080)
    tool(name, args)  run.tool_called: same operation and arguments hash (after the
                      call's run.approval_requested and run.approval_decided, if it needed approval)
    spawn(h, input)   run.child_spawned (or run.spawn_refused, raised again): same
                      handler, input, tools and model (a spawn no event could
                      record is refused again, before any of them: decision 0078)
    child.result()    run.child_finished: the same child
    inbox/now/random  the kind of observation
    progress/tokens/log  the kind, and what the handler reports

It hands back what was recorded (the reply, the tool's result or its error raised
the same way, the clock value, ...) and never reaches the world: no provider, no
executor, no append. The first mismatch becomes the run's `Divergence`; the
handler is then stopped by cancelling its scope (a `trio.Cancelled`, which a
handler's `except Exception` cannot swallow).

When the handler asks for more than was recorded, the recording decides: a run
that was cancelled or hit its deadline was interrupted right there (the handler
is stopped the same way and the recorded end stands); a run with no end yet was
recorded while still going (replay stops there); a run that completed or failed
has been asked something it never did: a divergence.

`gormes.actors.runs.continuation.ForkContext` extends this class: it copies each served
observation into a new run and goes live once the copied prefix is used up.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from gormes.providers.base import (
    InvalidModelReply,
    Message,
    ModelReply,
    ModelRequest,
    ProviderError,
    ToolSpec,
    Usage,
    request_hash,
    same_request,
)
from gormes.actors.runs.replay_diff import request_diff, tool_call_diff
from gormes.actors.runs.replay_report import Divergence, DivergenceDiff, RunState, describe
from gormes.actors.runs.request_record import RequestRecorder, rebuild_request, whole_request
from gormes.actors.runs.context import (
    ChildOutcome,
    ChildRun,
    RunContext,
    RunIdentity,
    SpawnRefused,
    ToolCallFailed,
    UnknownRunHandler,
    spawn_cap_refusal,
)
from gormes.actors.runs.approvals import replay_gate
from gormes.actors.runs.spawn_audit import UnrecordableSpawn, spawn_digest
from gormes.actors.runs.live import reply_from_record, tool_specs
from gormes.control.budgets import BudgetExceeded
from gormes.events.approvals import RunApprovalRequested
from gormes.events.base import Recorded, RedactedEvent
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    InboxItem,
    LogLevel,
    RunCancelled,
    RunChildFinished,
    RunChildSpawned,
    RunClockRead,
    RunFailed,
    RunInboxRead,
    RunLlmCut,
    RunLlmFailed,
    RunLlmTurn,
    RunLogged,
    RunProgressed,
    RunRandomDrawn,
    RunSpawnRefused,
    RunTokensAdded,
    RunToolCalled,
    canonical_arguments,
    tokens_of,
)

if TYPE_CHECKING:
    from gormes.actors.runs.replay import Replayer
    from gormes.actors.runs.recorded import RecordedRun
    from gormes.ops.registry import Registry

DEADLINE_EXCEEDED = "deadline exceeded"  # gormes.actors.runs.manager.DEADLINE_EXCEEDED

# why a replayed handler was stopped before it ended by itself
STOP_DIVERGED = "diverged"
STOP_UNTIL = "until"  # --until reached
STOP_INTERRUPTED = "interrupted"  # the recorded run was cancelled / ran out of time here
STOP_RECORDING_ENDS = "recording ends"  # the recorded run had not ended yet
STOP_REDACTED = "redacted"  # the next observation's data was redacted (decision 0026)

_encoder = msgspec.json.Encoder(order="sorted")


def canonical(value: Any) -> bytes:
    """JSON of a value with sorted keys: how replay compares handler data with the log."""
    return _encoder.encode(value)


def short(value: Any, width: int = 100) -> str:
    text = value if isinstance(value, str) else canonical(value).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


def tool_arguments(arguments: Any) -> tuple[str, str]:
    """(canonical text, sha256) exactly as the live context records them."""
    try:
        return canonical_arguments(arguments)
    except (msgspec.DecodeError, TypeError):
        raw = arguments if isinstance(arguments, str) else repr(arguments)
        return raw, hashlib.sha256(raw.encode()).hexdigest()


Asked = str | Callable[[], str]


def _text(asked: Asked) -> str:
    return asked if isinstance(asked, str) else asked()


# The longest replay waits at one turn the handler cut, whatever the recording says.
MAX_CUT_WAIT_S = 3600.0


def handler_cuts(recorded: RecordedRun) -> deque[Recorded]:
    """The turns of `recorded` cut short where the run went on after them (an
    observation follows), in log order: only a scope of the handler's own cuts a
    turn and lets the run go on (a deadline, a cancel or a pause ends it)."""
    last = recorded.observations[-1].position if recorded.observations else 0
    return deque(r for r in recorded.records if isinstance(r.event, RunLlmCut) and r.position < last)


class ReplayContext(RunIdentity, RunContext):
    copies = False  # a fork copies each observation it serves (see `served`)
    def __init__(self, recorded: RecordedRun, replayer: Replayer) -> None:
        self.recorded = recorded
        self.started = self._identity = recorded.started
        self.replayer = replayer
        # the code's operations plus the external tools the run recorded (no server is started)
        self.registry: Registry | None = replayer.registry_for(recorded.started)
        self.scope = trio.CancelScope()
        self.until = replayer.until
        self.cursor = 0  # observations served
        self.spawns_made = 0  # spawns served, against `max_children`
        self.stop: str | None = None
        self.divergence: Divergence | None = None
        self.redacted: Recorded | None = None  # the redacted observation it stopped at
        self.iterations = 0
        # the latest model request and the reply served to it: the conversation
        self._request: ModelRequest | None = None
        self._reply: ModelReply | None = None
        self._model_name: str | None = None
        self._operations: dict[str, str] = {}  # tool name asked -> operation name
        self._copied_requests = RequestRecorder()  # a fork records the code's requests
        # llm() may check a model turn inline (a subclass may match otherwise)
        self._strict_llm = type(self).llm_matches is ReplayContext.llm_matches
        self.children: list[ReplayChildRun] = []
        self._cuts = handler_cuts(recorded)

    @property
    def conversation(self) -> tuple[Message, ...]:
        """The conversation as the code last built it: its latest model request's
        messages, and the reply served to it if any."""
        if self._request is None:
            return ()
        if self._reply is None:
            return self._request.messages
        return (*self._request.messages, self._reply.message)

    # -- what the run is: from run.started (RunIdentity) ------------------------------

    @property
    def model_name(self) -> str:
        """The provider's model name. Replay opens no provider: it is the model of the
        first recorded model turn (see .coordination/replay-needs.md, item 6)."""
        if self._model_name is None:
            self._model_name = self._recorded_model_name()
        return self._model_name

    def _recorded_model_name(self) -> str:
        for record in self.recorded.observations:
            if isinstance(record.event, (RunLlmTurn, RunLlmFailed)) and record.event.model:
                return record.event.model
        spec = self.started.model or ""
        return spec.partition(":")[2] if ":" in spec else spec

    # -- serving -------------------------------------------------------------------------

    def peek(self) -> Recorded | None:
        observations = self.recorded.observations
        return observations[self.cursor] if self.cursor < len(observations) else None

    async def take(
        self, asked: Asked, matches: Callable[[Any], bool],
        diff: Callable[[Any], DivergenceDiff | None] | None = None,
    ) -> Recorded | None:
        """The next recorded observation if `matches(event)`; otherwise the run has
        diverged and the handler is stopped. None means: nothing recorded is left to
        serve and the caller should go live (only a fork does). `asked` (text, or a
        function making it) describes the call, for a divergence; `diff(event)` says
        what differs from the recorded event, when it can."""
        observations = self.recorded.observations
        if self.cursor >= len(observations):
            return await self.exhausted(_text(asked))
        record = observations[self.cursor]
        if self.until is not None and record.position > self.until:
            await self.halt(STOP_UNTIL)
        if isinstance(record.event, RedactedEvent):
            self.redacted = record
            await self.halt(STOP_REDACTED)
        if not matches(record.event):
            if self.divergence is None and diff is not None:
                self.divergence = Divergence(
                    run_id=self.run_id, position=record.position, seq=record.event.seq,
                    recorded=describe(record.event), asked=_text(asked), diff=diff(record.event),
                )
            await self.diverge(record.position, record.event.seq, describe(record.event), _text(asked))
        self.cursor += 1
        return record

    async def exhausted(self, asked: str) -> Recorded | None:
        """The handler asked for more than was recorded."""
        end = self.recorded.end
        if end is None:
            await self.halt(STOP_RECORDING_ENDS)
        assert end is not None
        event = end.event
        if isinstance(event, RunCancelled) or (isinstance(event, RunFailed) and event.error == DEADLINE_EXCEEDED):
            await self.halt(STOP_INTERRUPTED)
        await self.diverge(end.position, None, describe(event), asked)
        return None  # not reached

    async def diverge(self, position: int, seq: int | None, recorded: str, asked: str) -> None:
        if self.divergence is None:
            self.divergence = Divergence(
                run_id=self.run_id, position=position,
                seq=seq if seq is not None else self.cursor + 1, recorded=recorded, asked=asked,
            )
        await self.halt(STOP_DIVERGED)

    async def halt(self, why: str) -> None:
        """Stop the handler: cancel its scope and raise `trio.Cancelled` at once."""
        if self.stop is None:
            self.stop = why
        self.scope.cancel()
        await trio.lowlevel.checkpoint()
        raise AssertionError("a cancelled scope let a checkpoint pass")  # pragma: no cover

    async def served(self, record: Recorded, event: Any = None) -> None:
        """Called with each observation served; a fork copies it (`event` replaces it)."""

    def state(self) -> RunState:
        last = self.recorded.observations[self.cursor - 1] if self.cursor else None
        return RunState(
            run_id=self.run_id,
            position=last.position if last is not None else self.recorded.started_position,
            seq=self.cursor,
            iterations=self.iterations,
            tokens=sum((tokens_of(r.event) for r in self.recorded.observations[: self.cursor]), Tokens()),
            messages=[msgspec.to_builtins(m) for m in self.conversation],
            children=[c.run_id for c in self.children],
        )

    # -- the observations ----------------------------------------------------------------

    def tool_schemas(self) -> tuple[ToolSpec, ...]:
        return tool_specs(self.registry, self.trust, self.allowed_tools)

    def llm_matches(self, event: Any, digest: str, request: ModelRequest) -> bool:
        """Whether a recorded turn (a reply, a failure, or a cut) is the one `request` asks."""
        return (
            isinstance(event, (RunLlmTurn, RunLlmFailed, RunLlmCut))
            and same_request(event.request_hash, digest, request)
            and (event.model or request.model) == request.model
        )

    async def llm(self, request: ModelRequest) -> ModelReply:
        digest = request_hash(request)
        self._request, self._reply = request, None
        if self._cuts and self._cuts[0].event.at_seq == self.cursor + 1:
            await self._wait_for_the_handlers_cut(self._cuts.popleft(), digest, request)
        while True:
            # the next observation, if `until` allows serving it and it matches: served
            # at once; anything else is for `take` to judge
            observations, cursor = self.recorded.observations, self.cursor
            record = observations[cursor] if cursor < len(observations) else None
            if record is not None and (self.until is None or record.position <= self.until) and (
                (type(e := record.event) is RunLlmTurn and same_request(e.request_hash, digest, request)
                 and e.model == request.model)
                if self._strict_llm else self.llm_matches(record.event, digest, request)
            ):
                self.cursor = cursor + 1
            else:
                record = await self.take(
                    lambda: f"llm model={request.model} request {digest[:12]} ({len(request.messages)} messages)",
                    lambda e: self.llm_matches(e, digest, request),
                    lambda e: self.request_diff(e, request),
                )
                if record is None:
                    return await self.go_live().llm(request)
            event = record.event
            if isinstance(event, RunLlmTurn):
                if self.copies:
                    await self.served(record, msgspec.structs.replace(
                        event, request_hash=digest, model=request.model, message_count=len(request.messages),
                        request=self._copied_requests.record(request),
                    ))
                self.iterations += 1
                reply = self._reply = reply_from_record(event)
                return reply
            if self.copies:
                await self.served(record, msgspec.structs.replace(
                    event, request_hash=digest, model=request.model, request=self._copied_requests.record(request),
                ))
            if not (event.retryable and self._retried(event, digest, request)):
                billed = None if event.usage is None else msgspec.convert(event.usage, Usage, from_attributes=True)
                if event.error_type == "InvalidModelReply":
                    raise InvalidModelReply(event.error, retryable=event.retryable, usage=billed)
                if event.error_type == "BudgetExceeded":
                    raise BudgetExceeded(event.error)
                raise ProviderError(event.error, retryable=event.retryable, usage=billed)

    async def _wait_for_the_handlers_cut(self, cut: Recorded, digest: str, request: ModelRequest) -> None:
        """The recorded turn was cut short here and the run went on: a scope of the
        handler's own cancelled it (decision 0080). The call waits, as the live one
        did, until that scope cancels it again: at most twice the recorded time and a
        second (and never past MAX_CUT_WAIT_S: a file's recorded time is its word),
        past which, or for another request than the one cut, the run diverges."""
        event: RunLlmCut = cut.event  # type: ignore[assignment]
        if self.until is not None and cut.position > self.until:
            await self.halt(STOP_UNTIL)
        asked = f"llm model={request.model} request {digest[:12]} ({len(request.messages)} messages)"
        if not self.llm_matches(event, digest, request):  # a fork with another model takes any
            await self.diverge(cut.position, None, describe(event), asked)
        waited = min(2 * event.duration_ms / 1000 + 1.0, MAX_CUT_WAIT_S)
        with trio.move_on_after(waited):
            await trio.sleep_forever()
        await self.diverge(cut.position, None, describe(event),
                           f"{asked}, not cut short by the handler within {waited:g} s")

    def request_diff(self, event: Any, request: ModelRequest) -> DivergenceDiff | None:
        """What differs between the recorded request at the cursor and the code's."""
        if not isinstance(event, (RunLlmTurn, RunLlmFailed)):
            return None
        recorded = rebuild_request((r.event for r in self.recorded.observations), self.cursor)
        return request_diff(recorded, whole_request(request), recorded_model=event.model,
                            recorded_count=event.message_count if isinstance(event, RunLlmTurn) else None)

    def _retried(self, failed: RunLlmFailed, digest: str, request: ModelRequest) -> bool:
        """Whether the live context tried the same request again after this failure."""
        following = self.peek()
        if following is None:
            return False
        event = following.event
        if isinstance(event, RunLlmFailed):
            return same_request(event.request_hash, digest, request) and event.attempt == failed.attempt + 1
        return isinstance(event, RunLlmTurn) and same_request(event.request_hash, digest, request)

    def operation_name(self, name: str) -> str:
        operation = self._operations.get(name)
        if operation is None:
            spec = self.registry.get(name) if self.registry is not None else None
            operation = self._operations[name] = spec.name if spec is not None else name
        return operation

    async def tool(self, name: str, arguments: Any) -> Any:
        operation = self._operations.get(name) or self.operation_name(name)
        try:
            args_text, args_hash = canonical_arguments(arguments)
        except (msgspec.DecodeError, TypeError):
            args_text, args_hash = tool_arguments(arguments)
        observations, cursor = self.recorded.observations, self.cursor
        record = observations[cursor] if cursor < len(observations) else None
        if record is not None and type(record.event) is RunApprovalRequested:  # decision 0033
            waiting = await replay_gate(self, operation, args_hash)
            if waiting is not None:  # the record ends before the decision: live waits for it
                return await self.go_live_after_approval(name, arguments, (operation, args_hash), waiting)
            observations, cursor = self.recorded.observations, self.cursor
            record = observations[cursor] if cursor < len(observations) else None
        if record is not None and (self.until is None or record.position <= self.until) and (
            type(e := record.event) is RunToolCalled and e.operation == operation and e.args_hash == args_hash
        ):
            self.cursor = cursor + 1
        else:
            record = await self.take(
                lambda: f"tool {operation} {short(args_text)}",
                lambda e: isinstance(e, RunToolCalled) and e.operation == operation and e.args_hash == args_hash,
                lambda e: tool_call_diff(e, operation, args_text) if isinstance(e, RunToolCalled) else None,
            )
            if record is None:
                return await self.go_live().tool(name, arguments)
        if self.copies:
            await self.served(record)
        event: RunToolCalled = record.event  # type: ignore[assignment]
        if event.outcome != "ok":
            raise ToolCallFailed(event.operation, event.outcome, event.error or "")
        return event.result

    async def spawn(
        self,
        handler: str,
        input: Any,
        *,
        tools: tuple[str, ...] | list[str] | None = None,
        model: str | None = None,
        deadline_s: float | None = None,
    ) -> ChildRun:
        try:  # what no event could record was refused live before anything else, unrecorded
            spawn_digest(handler, input, None if tools is None else tuple(tools), model)
        except UnrecordableSpawn as exc:
            raise SpawnRefused(exc.reason) from None
        if self.depth + 1 > self.max_depth:
            raise SpawnRefused(f"depth cap reached: run {self.run_id} is at depth {self.depth} of {self.max_depth}")
        capped = spawn_cap_refusal(self.run_id, self.spawns_made, self.max_children)
        if capped is not None:
            raise SpawnRefused(capped)
        try:
            self.replayer.handlers.get(handler)
        except UnknownRunHandler as exc:
            raise SpawnRefused(str(exc)) from None
        wanted_tools = None if tools is None else tuple(tools)
        asked = f"spawn {handler} {short(input)}" + (f" tools={list(wanted_tools)}" if wanted_tools is not None else "")
        # the spawn as recorded: started, or refused by its tree's cap (decision 0063)
        record = await self.take(asked, lambda e: (
            isinstance(e, (RunChildSpawned, RunSpawnRefused)) and e.handler == handler
            and canonical(e.input) == canonical(input)
            and e.tools == wanted_tools and e.model == model
        ))
        if record is None:
            return await self.go_live().spawn(handler, input, tools=tools, model=model, deadline_s=deadline_s)
        if self.copies:
            await self.served(record)
        if isinstance(record.event, RunSpawnRefused):
            raise SpawnRefused(record.event.reason)
        self.spawns_made += 1
        child = ReplayChildRun(self, record.event, self.replayer.start_child(self, record.event))  # type: ignore[arg-type]
        self.children.append(child)
        return child

    async def inbox(self) -> list[InboxItem]:
        record = await self.take("inbox read", lambda e: isinstance(e, RunInboxRead))
        if record is None:
            return await self.go_live().inbox()
        if self.copies:
            await self.served(record)
        return list(record.event.messages)  # type: ignore[union-attr]

    async def progress(self, progress: Any) -> None:
        asked = f"progress {short(progress)}"
        record = await self.take(asked, lambda e: (
            isinstance(e, RunProgressed) and canonical(e.progress) == canonical(progress)
        ))
        if record is None:
            return await self.go_live().progress(progress)
        if self.copies:
            await self.served(record)

    async def tokens(self, input: int = 0, output: int = 0, cache_read: int = 0, cache_write: int = 0) -> None:
        asked = f"tokens +{input} in, +{output} out, +{cache_read} cached" + (
            f", +{cache_write} written to the cache" if cache_write else "")
        record = await self.take(asked, lambda e: (
            isinstance(e, RunTokensAdded)
            and (e.input, e.output, e.cache_read, e.cache_write) == (input, output, cache_read, cache_write)
        ))
        if record is None:
            return await self.go_live().tokens(input, output, cache_read, cache_write)
        if self.copies:
            await self.served(record)

    async def now(self) -> float:
        record = await self.take("clock read", lambda e: isinstance(e, RunClockRead))
        if record is None:
            return await self.go_live().now()
        if self.copies:
            await self.served(record)
        return record.event.value  # type: ignore[union-attr]

    async def random(self) -> float:
        record = await self.take("random draw", lambda e: isinstance(e, RunRandomDrawn))
        if record is None:
            return await self.go_live().random()
        if self.copies:
            await self.served(record)
        return record.event.value  # type: ignore[union-attr]

    async def log(self, message: str, level: LogLevel = "info") -> None:
        asked = f"log {level} {short(message)}"
        record = await self.take(asked, lambda e: (
            isinstance(e, RunLogged) and e.message == message and e.level == level
        ))
        if record is None:
            return await self.go_live().log(message, level)
        if self.copies:
            await self.served(record)

    def go_live(self) -> RunContext:
        raise AssertionError("a replay never goes live")  # pragma: no cover - take() halts first

    async def go_live_after_approval(self, name: str, arguments: Any, call: tuple[str, str], approval_id: str) -> Any:
        """A fork's (a resumed run's) prefix ended on an approval's request: the live
        part waits for that request's decision instead of asking again."""
        live = self.go_live()
        live.approvals_waiting[call] = approval_id  # type: ignore[attr-defined]
        return await live.tool(name, arguments)

    async def child_finished(self, child: ReplayChildRun) -> ChildOutcome:
        asked = f"result of child {child.run_id}"
        record = await self.take(asked, lambda e: (
            isinstance(e, RunChildFinished) and e.child_run_id == child.run_id
        ))
        if record is None:
            raise AssertionError("a served child is never live")  # pragma: no cover
        if self.copies:
            await self.served(record)
        e: RunChildFinished = record.event  # type: ignore[assignment]
        return ChildOutcome(run_id=e.child_run_id, status=e.status, result=e.result, error=e.error, tokens=e.tokens)


class ReplayChildRun(ChildRun):
    """A child as replay hands it to the parent. With children replayed, `done` is
    set when the child's own replay has ended; `result()` waits for it, then serves
    the parent's recorded `run.child_finished`. `cancel()` changes nothing: the
    child's recording already says where it stopped."""

    def __init__(self, parent: ReplayContext, spawned: RunChildSpawned, done: trio.Event | None) -> None:
        self._parent = parent
        self._spawned = spawned
        self._done = done
        self._outcome: ChildOutcome | None = None

    @property
    def run_id(self) -> str:
        return self._spawned.child_run_id

    @property
    def handler(self) -> str:
        return self._spawned.handler

    async def result(self) -> ChildOutcome:
        if self._outcome is None:
            if self._done is not None:
                await self._done.wait()
            self._outcome = await self._parent.child_finished(self)
        return self._outcome

    async def cancel(self, reason: str = "cancelled by parent") -> None:
        await trio.lowlevel.checkpoint()
