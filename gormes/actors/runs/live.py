"""The live `RunContext`: reaches the world, records each observation, then returns it.

Recording is `append, durable, then return`: the append is shielded from
cancellation, so an observation on the log is always one the handler received
(a deadline or a cancel lands at the handler's next checkpoint instead). The
common recordings (a model turn, an inbox read) wait for their commit with the
store's held waits (`append_held`, `transact_held`), which do what a shielded
scope around the wait does without entering a scope: a scope cost more than
anything else a step does (decision 0038).
A lock keeps `seq` order and stream order the same.

The run's lifecycle (run.started, the terminal event, cancel scopes, children's
nursery) is driven by gormes/actors/runs/manager.py; this module is only the door.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from gormes.providers.base import (
    Message,
    ModelReply,
    ModelRequest,
    on_cancel,
    ProviderError,
    ToolCall,
    ToolSpec,
    Usage,
    request_hash,
)
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
from gormes.actors.runs.request_record import RequestRecorder
from gormes.actors.runs.spawn_audit import UnrecordableSpawn, spawn_audited, spawn_digest, text_digest
from gormes.control.output_ceiling import held_to, sent_max_tokens
from gormes.errors import GormesError, UserError
from gormes.events.audit import AuditOutcome
from gormes.events.audit_chain import append_sealed
from gormes.events.base import Event
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    NO_TOKENS,
    InboxItem,
    LogLevel,
    RecordedReply,
    RecordedToolCall,
    RunChildFinished,
    RunChildSpawned,
    RunClockRead,
    RunSpawnRefused,
    RunInboxRead,
    RunLlmCut,
    RunLlmFailed,
    RunLlmTurn,
    RunLogged,
    RunMessageSent,
    RunProgressed,
    RunRandomDrawn,
    RunTokensAdded,
    RunToolCalled,
    canonical_arguments,
    run_stream,
    tokens_of,
    turn_usage,
)
from gormes.events.store import AppendRequest
from gormes.ops.executor import refusal_request
from gormes.ops.input_text import surrogate_text
from gormes.ops.spec import Caller, OperationDenied

if TYPE_CHECKING:
    from gormes.actors.runs.child_resumption import ChildResumption
    from gormes.actors.runs.tool_resumption import ToolResumption
    from gormes.actors.jobs.context import JobContext
    from gormes.actors.jobs.views import InboxMessage
    from gormes.providers.base import Provider
    from gormes.actors.runs.manager import LiveRun, RunManager
    from gormes.ops.registry import Registry

TokenSink = Callable[[Tokens, "str | None"], Awaitable[None]]  # (usage, the model of its turn)

CHILD_TRUST = "child-agent"


# -- converting the providers' neutral types to recorded ones and back ------------


def record_reply(reply: ModelReply) -> RecordedReply:
    return RecordedReply(
        content=reply.message.content,
        tool_calls=tuple(
            RecordedToolCall(id=c.id, name=c.name, arguments=c.arguments)
            for c in reply.message.tool_calls
        ),
        finish_reason=reply.finish_reason,
        model=reply.model,
    )


def reply_from_record(turn: RunLlmTurn) -> ModelReply:
    """The ModelReply a recorded turn stands for (what replay hands the handler)."""
    r = turn.reply
    calls = tuple([ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in r.tool_calls]) if r.tool_calls else ()
    message = Message(role="assistant", content=r.content, tool_calls=calls)
    u = turn_usage(turn)
    usage = Usage(input=u.input, output=u.output, cache_read=u.cache_read, cache_write=u.cache_write,
                  reasoning=u.reasoning)
    return ModelReply(message=message, usage=usage, finish_reason=r.finish_reason, model=r.model)


def tool_specs(registry: Registry | None, trust: str, allowed: tuple[str, ...] | None) -> tuple[ToolSpec, ...]:
    """The tools a run with `trust` and allowlist `allowed` may offer its model, as
    providers' `ToolSpec`s; the same tuple for every run with the same trust and
    allowlist until the registry changes (so a request's tools encode once, see
    `providers.base.tools_json`)."""
    if registry is None:
        return ()
    return registry.derived(("tool_specs", trust, allowed), lambda: tuple(
        ToolSpec(name=s.name, description=s.description, parameters=s.parameters)
        for s in registry.tool_schemas(trust, allowed)
    ))


def error_text(exc: BaseException) -> str:
    """One line for the log: our own errors as they read, others with their type."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, GormesError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


BACKOFF_MAX_S = 30.0  # the longest wait our own backoff makes between two attempts
RETRY_AFTER_MAX_S = 120.0  # the longest a server's retry-after may make us wait
_MESSAGE_TYPES = (RunMessageSent.__struct_config__.tag,)  # what an inbox read decodes of its run's stream


def retry_wait(exc: ProviderError, backoff_s: float, attempt: int) -> float:
    """Seconds to wait before attempt `attempt + 1`: the exponential backoff, or the
    server's `retry_after` when it asks for longer (capped: a server asking for an
    hour should fail the turn through the retries, not hang the run)."""
    wait = min(backoff_s * 2 ** (attempt - 1), BACKOFF_MAX_S)
    asked = getattr(exc, "retry_after", None)
    if asked is not None and asked > wait:
        wait = min(float(asked), RETRY_AFTER_MAX_S)
    return wait


def usage_tokens(u: Usage) -> Tokens:
    return Tokens(input=u.input, output=u.output, cache_read=u.cache_read, cache_write=u.cache_write,
                  reasoning=u.reasoning)


def _ms(started: float) -> int:
    return int((trio.current_time() - started) * 1000)


class _RecordingLock:
    """A run's recording lock (seq order = stream order), FIFO. Like `trio.Lock`, a
    cancelled run stops here before anything is recorded; unlike it, a free lock
    (nearly always) is taken with no schedule point (the recording waits for its
    commit right after anyway) and no owner bookkeeping."""

    __slots__ = ("_free",)

    def __init__(self) -> None:
        self._free = trio.Semaphore(1)

    async def __aenter__(self) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self._free.acquire_nowait()
        except trio.WouldBlock:
            await self._free.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self._free.release()

    async def acquire_held(self) -> None:
        """Take the lock whatever cancel is pending (a tool call's audit, which must
        be recorded): at once when it is free, else waiting shielded."""
        try:
            self._free.acquire_nowait()
        except trio.WouldBlock:
            with trio.CancelScope(shield=True):
                await self._free.acquire()

    def release(self) -> None:
        self._free.release()


class LiveChildRun(ChildRun):
    def __init__(self, parent: LiveRunContext, child: LiveRun) -> None:
        self._parent = parent
        self._child = child
        self._observed: ChildOutcome | None = None
        self._observing = trio.Lock()

    @property
    def run_id(self) -> str:
        return self._child.run_id

    @property
    def handler(self) -> str:
        return self._child.handler

    async def result(self) -> ChildOutcome:
        async with self._observing:
            if self._observed is None:
                await self._child.done.wait()
                o = self._child.outcome
                assert o is not None
                outcome = ChildOutcome(
                    run_id=o.run_id, status=o.status, result=o.result, error=o.error, tokens=o.tokens,  # type: ignore[arg-type]
                )
                await self._parent._record(lambda seq: RunChildFinished(
                    seq=seq, child_run_id=o.run_id, status=outcome.status, result=o.result,
                    error=o.error, tokens=o.tokens,
                ))
                self._observed = outcome
            return self._observed

    async def cancel(self, reason: str = "cancelled by parent") -> None:
        self._child.cancel(reason)


class LiveRunContext(RunIdentity, RunContext):
    """`next_seq` > 1 continues a run whose first observations are already recorded
    (a fork or a resumed run); `tokens` is then the total recorded so far."""

    def __init__(
        self,
        manager: RunManager,
        run: LiveRun,
        provider: Provider | None,
        *,
        next_seq: int = 1,
        tokens: Tokens | None = None,
        token_sink: TokenSink | None = None,
        job: JobContext | None = None,
        holding_job: JobContext | None = None,
    ) -> None:
        self._manager = manager
        self._run = self._identity = run
        self._provider = provider
        self._store = manager.store
        self._stream = run_stream(run.run_id)
        self._seq = next_seq
        self._lock = _RecordingLock()
        self._requests = RequestRecorder()
        self.total_tokens = tokens or Tokens()
        self._token_sink = token_sink
        self._job = job
        self._holding_job = job or holding_job
        self._inbox_after = 0  # the stream version the run's inbox was read up to
        self._inbox_seq: int | None = None  # `_seq` just after that read's receipt (None: no read yet)
        self._read_ids: set[str] = set()
        self.children_nursery: trio.Nursery | None = None  # set by the driver
        self.spawns_made = 0  # against `max_children` (a fork's starts at its prefix's)
        self._as_caller: Caller | None = None
        # a resumed run: which earlier children its live spawns take over
        self.child_resumption: ChildResumption | None = None
        self.tool_resumption: ToolResumption | None = None  # a resumed run's calls after the cut
        # a resumed run: approvals its replayed prefix requested, by (operation, args hash)
        self.approvals_waiting: dict[tuple[str, str], str] = {}

    # -- what the run is (RunIdentity reads the rest from `_identity`) ----------------

    @property
    def model_name(self) -> str:
        return self._provider.model if self._provider is not None else ""

    @property
    def next_seq(self) -> int:
        return self._seq

    # -- recording ---------------------------------------------------------------------

    async def _record(self, make: Callable[[int], Event]) -> Event:
        async with self._lock:
            event = make(self._seq)
            await self._store.append_held(self._stream, [event])
            self._seq += 1
            tokens = tokens_of(event)
            if tokens is not NO_TOKENS:
                self.total_tokens = self.total_tokens + tokens
        return event

    async def record_observation(
        self, make: Callable[[int], Event], *, audit: AppendRequest | None = None,
        also: Sequence[AppendRequest] = (),
    ) -> Event:
        """An observation recorded with an audit event and other streams' appends, in
        one transaction (an approval's request: gormes/actors/runs/approvals.py)."""
        if audit is None and not also:
            return await self._record(make)
        async with self._lock:
            event = make(self._seq)
            with trio.CancelScope(shield=True):
                if audit is None:
                    await self._store.append_many([AppendRequest(self._stream, [event]), *also])
                else:
                    await append_sealed(self._store, audit, [AppendRequest(self._stream, [event]), *also])
            self._seq += 1
        return event

    async def record_observation_if(self, make: Callable[[int], Event], claim: Callable[[Any], bool]) -> Event | None:
        """An observation recorded only if `claim(tx)` holds in its transaction (what
        `claim` writes commits with it); None, nothing recorded, if it does not."""
        async with self._lock:
            seq, stream = self._seq, self._stream

            def write(tx: Any) -> Event | None:
                if not claim(tx):
                    return None
                event = make(seq)
                tx.append(stream, [event])
                return event

            with trio.CancelScope(shield=True):
                event = await self._store.transact(write)
            if event is not None:
                self._seq += 1
        return event

    @property
    def caller(self) -> Caller:
        """Who the run's tool calls come from."""
        return self._caller()

    @property
    def job(self) -> JobContext | None:
        """The job driving this run, if it is a job's own run (not a subagent)."""
        return self._job

    @property
    def holding_job(self) -> JobContext | None:
        """The job whose attempt this run is part of: its own, or (a subagent) its
        root run's. What a wait parks (its lease released), never what the run
        reads its inbox from or reports progress to."""
        return self._holding_job

    async def _count(self, tokens: Tokens, model: str | None = None) -> None:
        """Usage of this run's own (not a child's total): also to the job, if any,
        with the model of the turn (None: reported by the handler)."""
        if self._token_sink is not None and tokens != NO_TOKENS:
            await self._token_sink(tokens, model)

    # -- observations ------------------------------------------------------------------

    def tool_schemas(self) -> tuple[ToolSpec, ...]:
        executor = self._manager.executor
        return tool_specs(None if executor is None else executor.registry, self.trust, self.allowed_tools)

    def _caller(self) -> Caller:
        """Who the run's tool calls come from (fixed for the run's life)."""
        if self._as_caller is None:
            self._as_caller = Caller(trust=self.trust, id=self._stream, run_id=self.run_id, job_id=self._run.job_id,
                                     scope=self._run.memory_scope)
        return self._as_caller

    def _tool_names(self) -> frozenset[str]:
        executor = self._manager.executor
        if executor is None:
            return frozenset()
        return executor.registry.derived(
            ("tool_names", self.trust, self.allowed_tools),
            lambda: frozenset(s.name for s in self.tool_schemas()),
        )

    async def llm(self, request: ModelRequest) -> ModelReply:
        if self._provider is None:
            raise UserError(f"run {self.run_id} has no model: start it with a model spec")
        digest = request_hash(request)
        limits = self._manager.provider_limits
        provider_default = getattr(self._provider, "default_max_tokens", None)
        attempt = 0
        while True:
            attempt += 1
            sent = request  # what the provider is sent: the handler's request, held to its budgets
            cut: list[Usage] = []  # what a stream cut short had reported (`on_cancel`)
            started: float | None = None  # set as the request leaves
            try:
                if not self._run.budgets and not limits.watches(self._provider.name, request.model):
                    # charged to no budget, no rate rule or outage guard: both turns below
                    # would yield at once; spared their two context managers a turn
                    started = trio.current_time()
                    with on_cancel(cut.append):
                        reply = await self._provider.complete(request)
                else:
                    # budgets reserve the worst case (or refuse: BudgetExceeded) and settle after;
                    # the provider is sent no more output than they held (decision 0065), and the
                    # rate limits count what it is sent, as a server counts its max_tokens
                    async with self._manager.budgets.turn(self._run, request) as spend:
                        sent = held_to(request, spend.output_ceiling, provider_default)
                        async with limits.turn(self._provider.name, sent) as turn:
                            started = trio.current_time()  # the request's time, not its wait for room
                            try:
                                with on_cancel(lambda usage: (spend.used(usage), cut.append(usage))):
                                    reply = await self._provider.complete(sent)
                            except ProviderError as exc:
                                if exc.usage is not None:  # a reply the API billed: its budgets pay it
                                    turn.used(exc.usage)
                                    spend.used(exc.usage)
                                raise
                            turn.used(reply.usage)
                            spend.used(reply.usage)
            except ProviderError as exc:
                held = sent_max_tokens(request, sent)
                billed = None if exc.usage is None else usage_tokens(exc.usage)
                await self._record(lambda seq, exc=exc, n=attempt, held=held, billed=billed: RunLlmFailed(
                    seq=seq, request_hash=digest, error=error_text(exc), retryable=exc.retryable,
                    attempt=n, model=request.model, error_type=type(exc).__name__,
                    request=self._requests.record(request), sent_max_tokens=held, usage=billed,
                ))
                if billed is not None:
                    await self._count(billed, request.model)
                if not exc.retryable or attempt > self._manager.llm_retries:
                    raise
                await trio.sleep(retry_wait(exc, self._manager.llm_backoff_s, attempt))
                continue
            except BaseException:  # a cancel, above all: a request sent, then cut short
                if started is not None:
                    await self._record_cut(digest, request.model, cut[0] if cut else None, started)
                raise
            u = reply.usage
            usage = usage_tokens(u)
            recorded, duration_ms = record_reply(reply), _ms(started)
            await self._record(lambda seq: RunLlmTurn(
                seq=seq, request_hash=digest, model=request.model, message_count=len(request.messages),
                reply=recorded, usage=usage, duration_ms=duration_ms, request=self._requests.record(request),
                cache_write=u.cache_write, sent_max_tokens=sent_max_tokens(request, sent),
            ))
            await self._count(usage, request.model)
            return reply

    async def _record_cut(self, digest: str, model: str, usage: Usage | None, started: float) -> None:
        """`run.llm_cut`: a turn cut short after its request left, with what its stream
        had reported (None: nothing), which the API bills (decision 0080), on the
        run's record and counted to its job; where the run goes on (the handler's own
        scope cut it), replay waits there for that scope. Held (the cancel that cut
        the turn is pending): the lock taken and the append waited for whatever is
        pending, the job's count shielded."""
        tokens = None if usage is None else usage_tokens(usage)
        await self._lock.acquire_held()
        try:
            event = RunLlmCut(at_seq=self._seq, request_hash=digest, model=model, usage=tokens,
                              duration_ms=_ms(started))
            await self._store.append_held(self._stream, [event])
            if tokens is not None:
                self.total_tokens = self.total_tokens + tokens
        finally:
            self._lock.release()
        if tokens is None:
            return
        with trio.CancelScope(shield=True):
            try:
                await self._count(tokens, model)
            except GormesError:  # the job no longer held (LockLost): its next attempt counts it
                pass

    async def tool(self, name: str, arguments: Any) -> Any:
        executor = self._manager.executor
        spec = executor.registry.get(name) if executor is not None else None
        operation = spec.name if spec is not None else name
        try:
            args_text, args_hash = canonical_arguments(arguments)
        except (msgspec.DecodeError, TypeError, UnicodeEncodeError) as exc:
            # recorded as given, but escaped: a lone surrogate (a Python caller's str) no event holds
            raw = (arguments if isinstance(arguments, str) else repr(arguments)).encode("utf-8", "backslashreplace")
            why = surrogate_text(arguments, "arguments") if isinstance(exc, UnicodeEncodeError) else str(exc)
            return await self._tool_failed(
                operation, raw.decode(), hashlib.sha256(raw).hexdigest(), "error",
                f"arguments are not JSON: {why}", "InvalidArguments", 0, audit_outcome="invalid",
            )
        allowed = self._tool_names()
        if executor is None or operation not in allowed:
            offered = ", ".join(sorted(allowed)) or "none"
            return await self._tool_failed(
                operation, args_text, args_hash, "denied",
                f"{operation} is not allowed for this run (allowed: {offered})", "ToolNotAllowed", 0,
            )

        if self.tool_resumption is not None:  # a resumed run: made already, after the cut?
            earlier = self.tool_resumption.take(operation, args_hash)
            if earlier is not None:
                return await self._served_again(earlier)
        caller = self._caller()
        try:  # the caps its class has on the input hold before a request records it (decision 0088)
            if spec.check_input is not None:  # (most have none: no second decode on a run's step)
                executor.admitted_input(spec, args_text, caller)  # type: ignore[arg-type]
        except UserError as exc:  # bad input or a refusal, recorded as the executor records either
            denied = isinstance(exc, OperationDenied)
            return await self._tool_failed(
                operation, args_text, args_hash, "denied" if denied else "error", error_text(exc),
                type(exc).__name__, 0, audit_outcome="denied" if denied else "invalid",
            )
        refused = await self._manager.approvals.gate(self, spec, args_text, args_hash)  # type: ignore[arg-type]
        if refused is not None:  # denied, or timed out: a denied call (decision 0033)
            return await self._tool_failed(operation, args_text, args_hash, "denied", refused, "ApprovalDenied", 0)
        started = trio.current_time()
        recorded: list[RunToolCalled] = []

        async def audit_and_record(audit: AppendRequest, output: Any, error: BaseException | None) -> None:
            """The executor's audit event and `run.tool_called`, in one transaction;
            held against a pending cancel (the executor's AuditWriter contract)."""
            if error is not None and not isinstance(error, Exception):
                await append_sealed(self._store, audit, held=True)  # cancelled: no observation
                return
            duration_ms = _ms(started)
            if error is None:
                try:
                    result = msgspec.to_builtins(output)
                except Exception:
                    await append_sealed(self._store, audit, held=True)
                    raise
            await self._lock.acquire_held()
            try:
                if error is None:
                    event = RunToolCalled(
                        seq=self._seq, operation=operation, arguments=args_text, args_hash=args_hash,
                        outcome="ok", result=result, duration_ms=duration_ms,
                    )
                else:
                    event = RunToolCalled(
                        seq=self._seq, operation=operation, arguments=args_text, args_hash=args_hash,
                        outcome="denied" if isinstance(error, OperationDenied) else "error",
                        error=error_text(error), error_type=type(error).__name__, duration_ms=duration_ms,
                    )
                await append_sealed(self._store, audit, [AppendRequest(self._stream, [event])], held=True)
                self._seq += 1
            finally:
                self._lock.release()
            recorded.append(event)

        try:
            output = await executor.call(operation, args_text, caller, audit=audit_and_record)
        except Exception as exc:  # noqa: BLE001 - a failed tool is an observation, not a crash
            if recorded:
                failed = recorded[0]
                raise ToolCallFailed(operation, failed.outcome, failed.error or "")
            # the audit could not be appended: the run records the call on its own
            outcome = "denied" if isinstance(exc, OperationDenied) else "error"
            text, kind = error_text(exc), type(exc).__name__
            await self._record(lambda seq: RunToolCalled(
                seq=seq, operation=operation, arguments=args_text, args_hash=args_hash, outcome=outcome,
                error=text, error_type=kind, duration_ms=_ms(started),
            ))
            raise ToolCallFailed(operation, outcome, text) from None
        assert recorded, "the executor returned without auditing the call"
        del output  # what the run was served is the recorded copy
        return recorded[0].result

    async def _served_again(self, earlier: RunToolCalled) -> Any:
        """A call the earlier run made after the cut, recorded again as it was made
        (tool_resumption.py): nothing runs, and nothing new is audited."""
        event = await self._record(lambda seq: msgspec.structs.replace(earlier, seq=seq))
        if earlier.outcome == "ok":
            return event.result  # type: ignore[attr-defined]
        raise ToolCallFailed(earlier.operation, earlier.outcome, earlier.error or "")

    async def _tool_failed(
        self, operation: str, args_text: str, args_hash: str, outcome: Any,
        error: str, error_type: str, duration_ms: int, *, audit_outcome: str = "denied",
    ) -> Any:
        """A call refused before the executor would run it: its `run.tool_called`
        and its audit event (a trust decision like any other), in one transaction."""
        executor = self._manager.executor
        if executor is not None:
            audit = executor.refusal(
                operation, args_text, self._caller(), error, outcome=audit_outcome,  # type: ignore[arg-type]
                error_type=error_type,
            )
        else:  # a run offered no tools at all still audits what it refused
            audit = refusal_request(
                operation, None, args_text, self._caller(), error, at=int(self._manager.clock() * 1000),
                outcome=audit_outcome, error_type=error_type,  # type: ignore[arg-type]
            )
        async with self._lock:
            event = RunToolCalled(
                seq=self._seq, operation=operation, arguments=args_text, args_hash=args_hash,
                outcome=outcome, error=error, error_type=error_type, duration_ms=duration_ms,
            )
            with trio.CancelScope(shield=True):
                await append_sealed(self._store, audit, [AppendRequest(self._stream, [event])])
            self._seq += 1
        raise ToolCallFailed(operation, outcome, error)

    async def spawn(
        self,
        handler: str,
        input: Any,
        *,
        tools: tuple[str, ...] | list[str] | None = None,
        model: str | None = None,
        deadline_s: float | None = None,
    ) -> ChildRun:
        asked_tools = None if tools is None else tuple(tools)
        try:
            digest = spawn_digest(handler, input, asked_tools, model)
        except UnrecordableSpawn as exc:
            # before the caps: replay refuses it at the same place, with nothing to serve
            await self._audit_spawn_refused(None, "invalid", "InvalidArguments", exc.reason)
            raise SpawnRefused(exc.reason) from None
        if self.depth + 1 > self.max_depth:
            refused = f"depth cap reached: run {self.run_id} is at depth {self.depth} of {self.max_depth}"
            await self._audit_spawn_refused(digest, "denied", "SpawnRefused", refused)
            raise SpawnRefused(refused)
        capped = spawn_cap_refusal(self.run_id, self.spawns_made, self.max_children)
        if capped is not None:
            await self._audit_spawn_refused(digest, "denied", "SpawnRefused", capped)
            raise SpawnRefused(capped)
        try:
            self._manager.handlers.get(handler)
        except UnknownRunHandler as exc:
            await self._audit_spawn_refused(digest, "denied", "SpawnRefused", str(exc))
            raise SpawnRefused(str(exc)) from None
        assert self.children_nursery is not None, "spawn outside the run's driver"
        # The place in the tree is taken before any await (the tree's other runs spawn
        # meanwhile) and given back if the spawn is not recorded. A refusal by the
        # tree's cap is recorded: replay cannot count the tree again.
        tree = self._run.tree
        tree_full = tree.take()
        if tree_full is not None:
            await self._spawn_refused_by_tree(digest, handler, input, asked_tools, model, tree_full)
        self.spawns_made += 1  # before the await: a spawn of another of the run's tasks counts it
        try:
            child_id, resumable = await self._record_spawn(handler, input, asked_tools, model, digest)
        except BaseException:
            self.spawns_made -= 1  # not recorded: not made
            tree.give_back()
            raise
        mine = tuple(s.name for s in self.tool_schemas())
        child = await self._manager.start_child(
            self, run_id=child_id, handler=handler, input=input,
            tools=mine if tools is None else tuple(t for t in tools if t in mine),
            model=model or self.model, deadline_s=deadline_s, resume=resumable,
        )
        return LiveChildRun(self, child)

    async def _record_spawn(
        self, handler: str, input: Any, tools: tuple[str, ...] | None, model: str | None, digest: str,
    ) -> tuple[str, Any]:
        """`run.child_spawned`, sealed with its audit record: the child's id, and the
        earlier run it takes over (a resumed run's), if any."""
        child_id = self._manager.new_id()
        resumable = None
        if self.child_resumption is not None:
            earlier = self.child_resumption.take(handler, input, tools, model)
            if earlier is not None:
                from gormes.actors.runs.continuation import resumable_run

                resumable = await resumable_run(self._manager, earlier)
        await self.record_observation(lambda seq: RunChildSpawned(
            seq=seq, child_run_id=child_id, handler=handler, input=input, tools=tools, model=model,
        ), audit=spawn_audited(self._caller(), digest, at=int(self._manager.clock() * 1000)))
        return child_id, resumable

    async def _spawn_refused_by_tree(
        self, digest: str, handler: str, input: Any, tools: tuple[str, ...] | None, model: str | None,
        reason: str,
    ) -> None:
        """Record the refusal (`run.spawn_refused`) with its audit record, then raise it."""
        audit = spawn_audited(self._caller(), digest, at=int(self._manager.clock() * 1000),
                              outcome="denied", error_type="SpawnRefused", reason=reason)
        await self.record_observation(lambda seq: RunSpawnRefused(
            seq=seq, handler=handler, input=input, tools=tools, model=model, reason=reason,
        ), audit=audit)
        raise SpawnRefused(reason)

    async def _audit_spawn_refused(self, digest: str | None, outcome: AuditOutcome, error_type: str, reason: str) -> None:
        """The audit record of a refused spawn (spawn_audit.py)."""
        audit = spawn_audited(self._caller(), digest, at=int(self._manager.clock() * 1000),
                              outcome=outcome, error_type=error_type, reason=reason)
        with trio.CancelScope(shield=True):
            await append_sealed(self._store, audit)

    async def spawn_invalid(self, arguments: str, reason: str) -> None:
        await self._audit_spawn_refused(text_digest(arguments), "invalid", "InvalidArguments", reason)

    @property
    def token_sink(self) -> TokenSink | None:
        return self._token_sink

    async def inbox(self) -> list[InboxItem]:
        """In ONE transaction: the job's unread messages (the job marks them read
        itself, and writes the tokens waiting for it: `JobContext.inbox_with`), the
        run's own new messages and the `run.inbox_read` receipt: no message can land
        between the read and its receipt, none the job marked read is lost to a
        cancel before the receipt, and a step waits for one commit, not two. The
        job's queue is on the run's store (agent_job opens the manager on it)."""
        stream, read_ids = self._stream, self._read_ids

        def read_and_receipt(
            tx: Any, seq: int, after: int, own: int | None, job_messages: Sequence[InboxMessage],
        ) -> tuple[int, list[InboxItem]]:
            items = [InboxItem(id=m.id, sender=m.sender, payload=m.payload, sent_at=m.sent_at)
                     for m in job_messages]
            # `own`: the stream's version if only this run wrote to it since the last
            # receipt (one event per seq, under this lock, each committed before the
            # next). A stream still at it holds no new message: the read is skipped.
            # The stream's version comes from the writer's version map (no SQL
            # while no other process wrote), so a step's read costs a lookup.
            if own is None or tx.stream_version(stream) != own:
                # the messages only: the run's own turns since the last read are not decoded
                for r in tx.read_stream(stream, after, _MESSAGE_TYPES):
                    e = r.event
                    if isinstance(e, RunMessageSent) and e.message_id not in read_ids:
                        items.append(InboxItem(id=e.message_id, sender=e.sender, payload=e.payload,
                                               sent_at=e.sent_at))
            items.sort(key=lambda m: (m.sent_at, m.id))
            event = RunInboxRead(seq=seq, messages=tuple(items))
            # everything up to the receipt has been read: the next read starts after it
            return tx.append(stream, [event]).version, items

        async with self._lock:
            seq, after = self._seq, self._inbox_after
            own = None if self._inbox_seq is None else after + (seq - self._inbox_seq)
            if self._job is None:
                self._inbox_after, items = await self._store.transact_held(
                    lambda tx: read_and_receipt(tx, seq, after, own, ()))
            else:
                self._inbox_after, items = await self._job.inbox_with(
                    lambda tx, messages: read_and_receipt(tx, seq, after, own, messages))
            self._seq = self._inbox_seq = seq + 1
        self._read_ids.update(m.id for m in items)
        return items

    def mark_read(self, message_ids: set[str]) -> None:
        """For a continued run: messages its recorded inbox reads already returned."""
        self._read_ids |= message_ids

    async def progress(self, progress: Any) -> None:
        await self._record(lambda seq: RunProgressed(seq=seq, progress=progress))
        if self._job is not None:
            await self._job.progress(progress)

    async def tokens(self, input: int = 0, output: int = 0, cache_read: int = 0, cache_write: int = 0) -> None:
        if min(input, output, cache_read, cache_write) < 0:
            raise UserError("token counts must not be negative")
        await self._record(lambda seq: RunTokensAdded(
            seq=seq, input=input, output=output, cache_read=cache_read, cache_write=cache_write,
        ))
        await self._count(Tokens(input=input, output=output, cache_read=cache_read, cache_write=cache_write))

    async def now(self) -> float:
        value = self._manager.clock()
        await self._record(lambda seq: RunClockRead(seq=seq, value=value))
        return value

    async def random(self) -> float:
        value = self._manager.random()
        await self._record(lambda seq: RunRandomDrawn(seq=seq, value=value))
        return value

    async def log(self, message: str, level: LogLevel = "info") -> None:
        await self._record(lambda seq: RunLogged(seq=seq, level=level, message=message))
