"""The executor: the one door through which any entry point runs an operation.

For every call (the CLI, an agent's tool call, a gateway, cron) it, in order:
asks its `call_limit`, when it has one and the limit counts the caller, for room
in the caller's class's call rate (-> `CallRateLimited`, an `OperationDenied`;
decision 0072 and its addendum: a call of no operation is audited too, so it takes
room); finds the operation (unknown -> `UnknownOperation`, a denial); checks the
caller's trust class against the spec BEFORE anything of the operation runs
(-> `OperationDenied`); validates the input with msgspec (-> `InvalidOperationInput`) and holds
it to the spec's `check_input`, the caps the caller's class has on it (decision 0088);
asks the spec whether it can run here (`available`, -> `OperationUnavailable`); runs the handler
under the spec's timeout (-> `OperationTimeout`); and appends one
`OperationAudited` event (gormes/events/audit.py) whatever happened, even when the
handler raised or the call was cancelled. The original error always propagates.

An operation whose change no log transaction covers (`OperationSpec.write_ahead`:
files written, a command run) gets a `started` record first, committed before its
handler runs, so that a process killed after the change still leaves a trace
(decision 0062). If it cannot be committed, the handler does not run
(`WriteAheadFailed`). Calls refused before the handler get no `started` record.

A caller that records the call itself (a run's `run.tool_called`) passes `audit`:
the executor then hands it the audit append request with the call's outcome, and
the caller appends it together with its own record, in one transaction (sealed
onto the day's hash chain with `gormes.events.audit_chain.append_sealed`).

An executor given `approvals` (the MCP server's) asks it about every call made
outside a run, once the caller's class and the input (its caps included) are checked: a call that
needs a person's approval waits for it there, and a refusal is `ApprovalDenied`,
audited as denied. A run's calls pass its own gate (gormes/actors/runs/approvals.py).

A caller that refuses a call before it reaches `call` (a run's tool allowlist,
arguments that are not JSON) makes the same audit event with `refusal` (or
`refuse`, which appends it): every trust decision is an audit event.

    executor = Executor(default_registry(), store, workspace=Path("."), jobs=queue)
    out = await executor.call("fs.read", '{"path": "README.md"}', Caller(trust="gateway", id="gw-1"))
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import trio

from gormes.events.audit_chain import append_sealed, seal
from gormes.events.audit_seal import sealing
from gormes.errors import StoreError, UserError
from gormes.events.audit import AuditOutcome, OperationAudited, audit_stream
from gormes.events.json_nesting import MAX_INPUT_NESTING, nesting_depth_over, value_depth_over
from gormes.events.store import AppendRequest, EventStore
from gormes.ops.input_text import nul_field, surrogate_text, text_surrogate
from gormes.ops.registry import Registry
from gormes.ops.spec import (
    TRUST_CLASSES, ApprovalDenied, Caller, InvalidOperationInput, OperationContext, OperationDenied,
    OperationError, OperationSpec, OperationTimeout, UnknownOperation,
)

if TYPE_CHECKING:
    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.store import Transaction

RawInput = bytes | bytearray | memoryview | str | dict | msgspec.Struct | None

# audit(request, output, error): append `request` (the call's audit event), and the
# caller's own record of the call with it. `output` is the call's output when
# `error` is None. Called exactly once per call, possibly with a cancel pending: it
# must append without a checkpoint a cancel could end (the store's held waits), so
# that a cancelled call is still audited; the executor enters no scope for it.
AuditWriter = Callable[[AppendRequest, Any, BaseException | None], Awaitable[None]]

# approvals(caller, spec, input): None, the call may run; a text, why it is refused
# (`ApprovalGate.gate_call`).
ApprovalCheck = Callable[[Caller, OperationSpec, Any], Awaitable["str | None"]]


class CallLimit(Protocol):
    """A rate limit on calls, asked before a call's input is read (the gateways'
    `GORMES_GATEWAY_RATE`: gormes/control/call_rate.py, which the MCP server gives
    its executor). `limits(caller)`: whether the caller's calls count (cheap: asked
    of every call); `admit(caller)`: take one call's room, or raise
    `CallRateLimited`."""

    def limits(self, caller: Caller) -> bool: ...

    async def admit(self, caller: Caller) -> None: ...


ERROR_TEXT_MAX = 300
SHELL_ENV = "GORMES_SHELL_ENABLED"

_encoder = msgspec.json.Encoder(order="deterministic")


class InvalidOperationOutput(OperationError):
    """A handler returned something that is not its spec's output type (a bug)."""


class WriteAheadFailed(OperationError):
    """A write-ahead operation's `started` record could not be committed, so its
    handler did not run."""


def shell_enabled_from_env() -> bool:
    return os.environ.get(SHELL_ENV, "") == "1"


class Executor:
    def __init__(
        self,
        registry: Registry,
        store: EventStore,
        *,
        workspace: Path | str | None = None,
        jobs: JobQueue | None = None,
        clock: Callable[[], float] = time.time,
        shell_enabled: bool | None = None,
        runs: object | None = None,
        progress: Callable[[str, int, int], None] | None = None,
        approvals: ApprovalCheck | None = None,
        call_limit: CallLimit | None = None,
    ) -> None:
        """`store` receives the audit events; `shell_enabled` None reads the
        environment (GORMES_SHELL_ENABLED=1) once, here; `runs`: what the run
        operations start runs with (the operator's foreground commands: a
        gormes/tools/run_admin.py `RunStarter`), carried to them untouched; `progress`:
        where a long operation reports how far it is (OperationContext.progress);
        `call_limit`: the call rate the calls it counts must fit (see the module doc)."""
        self.registry = registry
        self.store = store
        self.workspace = None if workspace is None else Path(workspace)
        self.jobs = jobs
        self.runs = runs
        self.progress = progress
        self.approvals = approvals  # the gate of calls made outside a run (see the module doc)
        self.call_limit = call_limit
        self.clock = clock
        self.shell_enabled = shell_enabled_from_env() if shell_enabled is None else shell_enabled

    def context_for(self, caller: Caller) -> OperationContext:
        return OperationContext(
            caller=caller, workspace=self.workspace, jobs=self.jobs, clock=self.clock,
            shell_enabled=self.shell_enabled, store=self.store, runs=self.runs,
            progress=self.progress,
        )

    async def call(
        self, name: str, raw_input: RawInput, caller: Caller, *, audit: AuditWriter | None = None
    ) -> Any:
        """Run operation `name` for `caller` and return its output (an instance of
        the spec's output type). `raw_input` may be JSON text or bytes (a model's
        tool arguments), a dict, or a Struct; empty text or None means `{}`.
        `audit`: see the module doc (None: the executor appends the audit event)."""
        spec = self.registry.get(name)
        record = _CallRecord(name, spec, caller, raw_input)
        try:
            # First: a call of no operation, or of one its class may not call, is
            # audited too, so it takes room as any call does (decision 0072's addendum).
            if self.call_limit is not None and self.call_limit.limits(caller):
                await self.call_limit.admit(caller)
            if spec is None:
                raise UnknownOperation(f"unknown operation {name!r}")
            if caller.trust not in TRUST_CLASSES or not spec.allows(caller.trust):
                raise OperationDenied(
                    f"{spec.name} may not be run by a {caller.trust!r} caller"
                    f" (allowed: {', '.join(t for t in TRUST_CLASSES if spec.allows(t))})"
                )
            value = decode_input(spec, raw_input)
            record.input_sha256 = _checked_digest(spec, value)  # what no event can record, first
            if spec.check_input is not None:
                spec.check_input(caller, value)
            ctx = self.context_for(caller)
            if spec.available is not None:
                spec.available(ctx)
            if self.approvals is not None and caller.run_id is None:
                refused = await self.approvals(caller, spec, value)
                if refused is not None:
                    raise ApprovalDenied(refused)
            record.allowed = True
            if spec.write_ahead:
                await self._write_ahead(record)
            seal_audit = None
            if audit is None:  # a caller's AuditWriter records more than the audit: it keeps its turn
                seal_audit = record.sealer(self.clock)
                ctx = replace(ctx, seal_audit=seal_audit)
            with trio.move_on_after(spec.timeout) as deadline, sealing(seal_audit):
                result = await spec.handler(ctx, value)
            if deadline.cancelled_caught:
                raise OperationTimeout(f"{spec.name} timed out after {spec.timeout:g}s")
            result = _check_output(spec, result)
        except BaseException as exc:
            record.failed(exc)
            try:
                await self._append(record, audit, None, exc)
            except Exception as audit_exc:  # noqa: BLE001 (the original error wins)
                exc.add_note(f"gormes: the audit event could not be appended: {audit_exc}")
            raise
        if record.sealed is not None and await record.landed(self.store):  # with the call's change (audit_seal.py)
            return result
        # An unaudited success is not a success: an append error propagates.
        await self._append(record, audit, result, None)
        return result

    def admitted_input(self, spec: OperationSpec, raw_input: RawInput, caller: Caller) -> Any:
        """The input decoded (`decode_input`) and held to the spec's `check_input`
        for `caller`, or the refusal raised. A run asks it before its approval gate
        records a request (gormes/actors/runs/live.py), as `call` does before its own:
        what the caller's class may not send is refused before it is recorded anywhere
        but in the refusal's audit record (decision 0088)."""
        value = decode_input(spec, raw_input)
        if spec.check_input is not None:
            spec.check_input(caller, value)
        return value

    def refusal(
        self, name: str, raw_input: RawInput, caller: Caller, reason: str,
        *, outcome: AuditOutcome = "denied", error_type: str = "OperationDenied",
    ) -> AppendRequest:
        """The audit append request for a call refused before `call` would run it
        (allowed false): `reason` is the refusal's first line, `outcome` denied, or
        invalid for input that is not even JSON."""
        return refusal_request(
            name, self.registry.get(name), raw_input, caller, reason,
            at=int(self.clock() * 1000), outcome=outcome, error_type=error_type,
        )

    async def refuse(
        self, name: str, raw_input: RawInput, caller: Caller, reason: str,
        *, outcome: AuditOutcome = "denied", error_type: str = "OperationDenied",
    ) -> None:
        """Append the audit event of a refused call (see `refusal`)."""
        request = self.refusal(name, raw_input, caller, reason, outcome=outcome, error_type=error_type)
        with trio.CancelScope(shield=True):
            await append_sealed(self.store, request)

    async def call_json(self, name: str, raw_input: RawInput, caller: Caller) -> bytes:
        """`call`, with the output encoded as JSON (what a model is shown)."""
        return msgspec.json.encode(await self.call(name, raw_input, caller))

    async def _write_ahead(self, record: _CallRecord) -> None:
        """Commit the call's `started` record; the handler runs only once it has."""
        at = int(self.clock() * 1000)
        request = AppendRequest(audit_stream(at), [record.started_event(at)])
        try:
            with trio.CancelScope(shield=True):  # a cancel lands at the handler's first checkpoint
                [started] = await append_sealed(self.store, request)
        except Exception as exc:
            record.allowed = False
            raise WriteAheadFailed(
                f"{record.name} did not run: its started audit record could not be committed: {exc}"
            ) from exc
        record.started_position = started.first_position

    async def _append(
        self, record: _CallRecord, audit: AuditWriter | None, output: Any, error: BaseException | None,
    ) -> None:
        at = int(self.clock() * 1000)
        event = record.event(at=at)
        if audit is not None:  # it holds against cancellation itself (see AuditWriter)
            await audit(AppendRequest(audit_stream(at), [event]), output, error)
            return
        # Shielded so that a cancelled call is still audited.
        with trio.CancelScope(shield=True):
            await append_sealed(self.store, AppendRequest(audit_stream(at), [event]))


def refusal_request(
    name: str, spec: OperationSpec | None, raw_input: RawInput, caller: Caller, reason: str,
    *, at: int, outcome: AuditOutcome = "denied", error_type: str = "OperationDenied",
) -> AppendRequest:
    """`Executor.refusal` for a caller with no executor (a run offered no tools)."""
    record = _CallRecord(name, spec, caller, raw_input)
    record.outcome = outcome
    record.error = error_text_of(error_type, reason)
    return AppendRequest(audit_stream(at), [record.event(duration_ms=0.0, at=at)])


def decode_input(spec: OperationSpec, raw: RawInput) -> Any:
    """Validate `raw` into the spec's input type, or raise `InvalidOperationInput`;
    a string field holding U+0000 is refused too (gormes/ops/input_text.py), and
    text holding a lone surrogate. A parsed input's lone surrogate is refused by
    `call`'s digest of the value (`_checked_digest`), which encodes it anyway."""
    value = _decode(spec, raw)
    if spec.schema is None and _may_hold_nul(raw):
        path = nul_field(spec.input_type, value)
        if path is not None:
            raise InvalidOperationInput(
                f"invalid input for {spec.name}: {path} holds U+0000 (NUL), which PostgreSQL cannot store"
                " as text (a log holding it could not be moved to PostgreSQL)"
            )
    return value


def _may_hold_nul(raw: RawInput) -> bool:
    """False when `raw` is JSON text with no `\\u0000` escape: JSON has no other way
    to write NUL (msgspec refuses a raw one), so the walk is spared (a tool call's
    arguments, the CLI's input). Parsed input (a dict, a Struct) is walked."""
    if isinstance(raw, str):
        return "\\u0000" in raw
    if isinstance(raw, (bytes, bytearray)):
        return b"\\u0000" in raw
    if isinstance(raw, memoryview):
        return b"\\u0000" in raw.tobytes()
    return raw is not None


def _decode(spec: OperationSpec, raw: RawInput) -> Any:
    # A spec with its own schema takes any JSON object, as a dict (see OperationSpec.schema).
    kind = spec.input_type if spec.schema is None else dict[str, Any]
    try:
        if spec.schema is None and isinstance(raw, kind):
            return raw
        if raw is None or (isinstance(raw, (str, bytes, bytearray)) and not raw.strip()):
            return msgspec.convert({}, kind)
        if isinstance(raw, (str, bytes, bytearray, memoryview)):
            text = _utf8(spec, raw) if isinstance(raw, str) else bytes(raw)
            if nesting_depth_over(text, MAX_INPUT_NESTING):  # room for the log's envelope (json_nesting)
                raise InvalidOperationInput(
                    f"invalid input for {spec.name}: JSON nested deeper than {MAX_INPUT_NESTING} levels"
                )
            return msgspec.json.decode(text, type=kind)
        if isinstance(raw, msgspec.Struct):
            return msgspec.convert(msgspec.to_builtins(raw), kind)
        if isinstance(raw, dict):
            # Parsed already (the MCP SDK's arguments): measured as text would be, so a
            # gateway cannot record what no export of the log could be imported with.
            if value_depth_over(raw, MAX_INPUT_NESTING):
                raise InvalidOperationInput(
                    f"invalid input for {spec.name}: JSON nested deeper than {MAX_INPUT_NESTING} levels"
                )
            return msgspec.convert(raw, kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidOperationInput(f"invalid input for {spec.name}: {exc}") from None
    raise InvalidOperationInput(
        f"invalid input for {spec.name}: expected a JSON object, got {type(raw).__name__}"
    )


def _utf8(spec: OperationSpec, raw: str) -> bytes:
    """JSON text as UTF-8; a lone surrogate in it (a Python caller's str) is invalid input."""
    try:
        return raw.encode()
    except UnicodeEncodeError as exc:
        raise InvalidOperationInput(f"invalid input for {spec.name}: {text_surrogate(exc)}") from None


def input_digest(value: Any) -> str:
    """sha256 of the input's canonical JSON (keys sorted)."""
    return hashlib.sha256(_encoder.encode(value)).hexdigest()


def _checked_digest(spec: OperationSpec, value: Any) -> str:
    """`input_digest` of a decoded input. A Python caller's dict or Struct can hold
    what no JSON text carries, and no event could record (decision 0077): a str
    with a lone surrogate, named by its field, found only then; or a value that is
    no JSON at all in a free field (an object, a dict with keys not strings).
    Either is invalid input."""
    try:
        return input_digest(value)
    except UnicodeEncodeError:
        raise InvalidOperationInput(f"invalid input for {spec.name}: {surrogate_text(value)}") from None
    except TypeError as exc:
        raise InvalidOperationInput(f"invalid input for {spec.name}: not JSON: {exc}") from None


def _raw_digest(raw: RawInput) -> str | None:
    """A digest of input that may not validate: its bytes, or its JSON when possible."""
    if isinstance(raw, str):
        return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return hashlib.sha256(bytes(raw)).hexdigest()
    try:
        return input_digest(raw)
    except (TypeError, ValueError, msgspec.EncodeError):
        return None


def _check_output(spec: OperationSpec, result: Any) -> Any:
    if isinstance(result, spec.output_type):
        return result
    try:
        return msgspec.convert(result, spec.output_type, from_attributes=True)
    except msgspec.ValidationError as exc:
        raise InvalidOperationOutput(
            f"{spec.name} returned {type(result).__name__}, not {spec.output_type.__name__}: {exc}"
        ) from None


def _outcome(exc: BaseException) -> str:
    """By the error's class: a refusal is denied; bad input (any `UserError` that
    is not a refusal or a store's failure: `InvalidOperationInput`, `InvalidJob`,
    `JobNotFound`...) is invalid."""
    if isinstance(exc, OperationDenied):
        return "denied"
    if isinstance(exc, OperationTimeout):
        return "timeout"
    if isinstance(exc, trio.Cancelled):
        return "cancelled"
    if isinstance(exc, UserError) and not isinstance(exc, StoreError):
        return "invalid"
    return "error"


def _error_text(exc: BaseException) -> str:
    return error_text_of(type(exc).__name__, str(exc))


def error_text_of(kind: str, message: str) -> str:
    """An audit record's `error`: `<kind>: <first line>`, cut to ERROR_TEXT_MAX."""
    lines = message.strip().splitlines()
    text = f"{kind}: {lines[0]}" if lines else kind
    return text if len(text) <= ERROR_TEXT_MAX else text[: ERROR_TEXT_MAX - 1] + "…"


class _Sealer:
    """A call's seal (OperationContext.seal_audit, audit_seal.py): the record of a
    success into a transaction. Called again for the same transaction it does
    nothing; for another (one run again after its connection was lost, before the
    commit was confirmed), the record is made afresh there. Once it has sealed
    (`used`), the layers below the handler no longer take it."""

    def __init__(self, record: _CallRecord, clock: Callable[[], float]) -> None:
        self.record = record
        self.clock = clock
        self.used = False
        self._tx: Transaction | None = None

    def __call__(self, tx: Transaction) -> None:
        if tx is self._tx:
            return
        at = int(self.clock() * 1000)
        result, (_, digest) = seal(tx, audit_stream(at), [self.record.event(at=at)])
        self._tx, self.used = tx, True
        self.record.sealed = (result.first_position, digest)


class _CallRecord:
    """What the audit event will say, filled in as the call goes."""

    def __init__(self, name: str, spec: OperationSpec | None, caller: Caller, raw: RawInput) -> None:
        self.name = spec.name if spec is not None else name
        self.spec = spec
        self.caller = caller
        self.raw = raw  # digested only if the input never validates (see `event`)
        self.input_sha256: str | None = None
        self.allowed = False
        self.outcome = "ok"
        self.error: str | None = None
        self.started = time.monotonic()  # not trio's clock: also read from the writer's thread
        self.sealed: tuple[int, str] | None = None  # (position, digest) of the record sealed
        self.started_position: int | None = None  # of the `started` record (write-ahead operations)

    def sealer(self, clock: Callable[[], float]) -> _Sealer:
        return _Sealer(self, clock)

    async def landed(self, store: EventStore) -> bool:
        """Whether the sealed record committed: its transaction may have been
        undone (the handler then caught the error and went on), and a record that
        never committed must still be appended."""
        assert self.sealed is not None
        position, digest = self.sealed
        found = await store.read_all(position - 1, limit=1)
        return bool(found) and getattr(found[0].event, "digest", None) == digest

    def failed(self, exc: BaseException) -> None:
        self.outcome = _outcome(exc)
        self.error = _error_text(exc)

    def started_event(self, at: int) -> OperationAudited:
        """The `started` record of a write-ahead call, its handler about to run."""
        return msgspec.structs.replace(self.event(at=at), outcome="started")

    def event(self, *, at: int, duration_ms: float | None = None) -> OperationAudited:
        """The audit event; `duration_ms` None: the time since the record was made."""
        if duration_ms is None:
            duration_ms = round((time.monotonic() - self.started) * 1000, 3)
        return OperationAudited(
            operation=self.name[:200],
            audit_kind=None if self.spec is None else self.spec.audit_kind,
            caller=self.caller.id,
            trust=self.caller.trust,
            run_id=self.caller.run_id,
            job_id=self.caller.job_id,
            allowed=self.allowed,
            outcome=self.outcome,  # type: ignore[arg-type]
            error=self.error,
            duration_ms=duration_ms,
            input_sha256=self.input_sha256 if self.input_sha256 is not None else _raw_digest(self.raw),
            mutating=False if self.spec is None else self.spec.mutating,
            at=at,
            started_position=self.started_position,
        )
