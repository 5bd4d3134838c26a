"""What an operation is, who may call it, and what its handler is given.

An `OperationSpec` describes one operation (`fs.read`, `job.submit`, ...): its
typed input and output, its trust classes and limits, and the async handler that
does the work. The executor (gormes/ops/executor.py) is the only caller of
handlers; it checks the trust class, validates the input, enforces the timeout and
audits every call before and after the handler runs.

Trust classes: `operator` (the local CLI), `gateway` (remote callers),
`child-agent` (subagents), `system` (cron, the daemon). Work carries the class
of whoever started it, or a narrower one (`narrower`, decision 0016).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from gormes.errors import GormesError, UserError

if TYPE_CHECKING:
    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.store import EventStore, Transaction

TrustClass = Literal["operator", "gateway", "child-agent", "system"]
TRUST_CLASSES: tuple[str, ...] = ("operator", "gateway", "child-agent", "system")

# Widest first: what work started by a class may be narrowed to, never widened
# (decision 0016). `gateway` is last: remote callers are trusted least, and a
# gateway is refused `knowledge.write`, which subagents may use, so a gateway's
# subagent must stay `gateway`. A class not listed (a typo, an old recording's
# placeholder) ranks below them all: nothing allows it.
TRUST_ORDER: tuple[str, ...] = ("operator", "system", "child-agent", "gateway")


def narrower(a: str, b: str) -> str:
    """The narrower of two trust classes (see TRUST_ORDER); `a` when they are equal."""

    def rank(trust: str) -> int:
        return TRUST_ORDER.index(trust) if trust in TRUST_ORDER else len(TRUST_ORDER)

    return b if rank(b) > rank(a) else a


Outcome = Literal["ok", "error", "denied", "invalid", "timeout", "cancelled"]


# -- errors ---------------------------------------------------------------------


class OperationError(GormesError):
    """Base of the errors the operation layer raises on purpose."""


class OperationDenied(UserError, OperationError):
    """The caller may not run this operation (unknown name, trust class, refused)."""


class UnknownOperation(OperationDenied):
    """No operation of that name is registered."""


class OperationUnavailable(OperationDenied):
    """The operation is registered but switched off or not configured here
    (no workspace for the fs tools, no job queue, shell.run not enabled)."""


class ApprovalDenied(OperationDenied):
    """A call its approval gate refused: denied by a person, or timed out."""


class CallRateLimited(OperationDenied):
    """A call its class's call rate refused (`GORMES_GATEWAY_RATE`, decision 0072),
    or its client's share of it (`GORMES_GATEWAY_CLIENT_RATE`, decision 0082): the
    window holds as many calls as the limit allows; `retry_after_s`, when the first
    of them leaves it."""

    def __init__(self, message: str, *, retry_after_s: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PathOutsideWorkspace(OperationDenied):
    """A path that resolves outside the workspace root (`..`, absolute, symlink)."""


class InvalidOperationInput(UserError, OperationError):
    """Input that does not match the operation's input type."""


class OperationTimeout(OperationError):
    """The handler overran the operation's timeout and was cancelled."""

    exit_code = 1


class InvalidOperationSpec(UserError, OperationError, ValueError):
    """A spec the registry refuses, raised at registration (or where `@gormes.operation`
    decorates): a user's operation file is input, so the CLI shows it as one line."""


# -- callers and contexts ---------------------------------------------------------


class Caller(msgspec.Struct, frozen=True, kw_only=True):
    """Who calls: a trust class, an id ("cli", "run-<id>", "job-<id>", "cron"),
    optionally the run and the job the caller acts for, and the memory scope it
    is pinned to (a run acting for a gateway client: that client's scope)."""

    trust: str  # one of TRUST_CLASSES; checked by the executor on every call
    id: str
    run_id: str | None = None
    job_id: str | None = None
    # The memory scope the caller works in (gormes/tools/memory.py `bound_scope`);
    # None: its class's default (its own chat, or project:default for the classes
    # that name their scope).
    scope: str | None = None

    @property
    def sender(self) -> str:
        """The name this caller signs job inbox messages with: "operator" for the
        operator, else the job it acts for (a parent messaging its child), else its id."""
        if self.trust == "operator":
            return "operator"
        return self.job_id or self.id


@dataclass(frozen=True, kw_only=True)
class OperationContext:
    """What a handler may use; built by the executor for each call."""

    caller: Caller
    workspace: Path | None = None  # the fs tools refuse to run without one
    jobs: JobQueue | None = None  # the job operations refuse to run without one
    clock: Callable[[], float] = time.time  # seconds since the epoch, like time.time
    shell_enabled: bool = False
    store: EventStore | None = None  # the operations that read or write the log refuse without one
    # The caller's runs (a gormes/tools/run_admin.py `RunStarter`: its RunManager and
    # where a fork or resume is driven); the run operations refuse to run without one.
    # The kernel only carries it: what it is, is the run operations' business.
    runs: object | None = None
    # Where a long operation says how far it is: progress(what, done, total), from
    # any thread of the call's trio run. The CLI shows it as a bar; None: nobody asks.
    progress: Callable[[str, int, int], None] | None = None
    # seal_audit(tx): seal this call's audit record (outcome ok) into `tx`, the
    # transaction whose commit is the call's change, so that the two commit together:
    # a process killed after that commit leaves no change unaudited. The executor
    # then appends no record of its own for a success (a failure after the commit
    # is recorded as well, as an error; a record whose transaction was undone is
    # made again). The job queue's commands and the actors' `ask` seal it
    # themselves when the handler has not (gormes/events/audit_seal.py); any other
    # handler that does not call it is audited once it returns. None outside the
    # executor.
    seal_audit: Callable[[Transaction], None] | None = None

    def seal_into(self, tx: Transaction) -> None:
        """`seal_audit(tx)` where the executor offers it (a no-op outside the executor)."""
        if self.seal_audit is not None:
            self.seal_audit(tx)


Handler = Callable[[OperationContext, Any], Awaitable[Any]]


@dataclass(frozen=True, kw_only=True)
class OperationSpec:
    """One operation. `input_type` and `output_type` are msgspec Structs; the
    handler receives a validated `input_type` instance and returns `output_type`."""

    name: str
    description: str
    input_type: type
    output_type: type
    handler: Handler
    trust: frozenset[str]
    audit_kind: str
    mutating: bool = False
    idempotent: bool = True
    prompt_visible: bool = False
    timeout: float = 10.0  # seconds
    doctor_checks: tuple[str, ...] = field(default_factory=tuple)
    # A raw JSON object schema of the input, for an operation whose input has no
    # Struct (an external MCP server's tool; `input_type` is then `dict`): the registry
    # offers it as is, the executor checks only that the input is a JSON object and
    # passes it on as a dict, and whoever serves the call validates the rest.
    schema: dict[str, Any] | None = None
    # Where an operation that is not in the code comes from ("mcp:time"); a run
    # records such operations in `run.started` so replay can offer them again.
    source: str | None = None
    # A run's call waits for a person's approval first (`gormes approve`/`deny`);
    # a deployment may require it of more operations (decision 0033).
    requires_approval: bool = False
    # Served over MCP to an operator-class caller (`gormes mcp --trust operator`,
    # gormes/mcp_server.py) although not prompt-visible: an operator's own MCP client
    # may decide approvals and read or raise budgets; no model's tool list and no other
    # class's MCP server ever offers it (decision 0037).
    operator_mcp: bool = False
    # Its change is no one log transaction the call's record could be sealed into
    # (files written, a command run, many transactions): the executor commits a
    # `started` audit record before the handler runs, so that a process killed
    # after the change still leaves its trace (decision 0062). Mutating only.
    write_ahead: bool = False
    # available(ctx) raises `OperationUnavailable` when the operation cannot run here
    # (switched off, not configured). The executor asks it before any `started`
    # record, so such a refusal stays one record. None: always available.
    available: Callable[[OperationContext], None] | None = None
    # check_input(caller, value): the caps the caller's class has on the call's input
    # (sizes, shapes, what it may ask for), pure and cheap, raising the refusal
    # (`InvalidOperationInput`, `OperationDenied`). The executor runs it right after
    # the input is decoded, before `available`, an approval request or any other record
    # of the call but its refusal (decision 0088); a run asks it before its own gate.
    # The handler runs only after it, so it need not check again. None: no such caps.
    check_input: Callable[[Caller, Any], None] | None = None
    # An operation made from what the log holds (memory.recall's answer, the memory
    # mirror's pages and the stale ones it removes): on a database that is not there
    # it is refused like a read, never run against an empty one (decision 0089).
    needs_database: bool = False

    @property
    def creates_database(self) -> bool:
        """Whether a call may make the database it is given when there is none: only
        a write of the log does; a read (and an operation made from what the log
        holds) on a mistyped `--db` says `no gormes database at ...` (decision 0089)."""
        return self.mutating and not self.needs_database

    def allows(self, trust: str) -> bool:
        return trust in self.trust

    @property
    def operator_only(self) -> bool:
        return self.trust == frozenset({"operator"})

    def info(self) -> OperationInfo:
        return OperationInfo(
            name=self.name,
            description=self.description,
            trust=[t for t in TRUST_CLASSES if t in self.trust],
            mutating=self.mutating,
            idempotent=self.idempotent,
            prompt_visible=self.prompt_visible,
            timeout=self.timeout,
            audit_kind=self.audit_kind,
            doctor_checks=list(self.doctor_checks),
            requires_approval=self.requires_approval,
            operator_mcp=self.operator_mcp,
            write_ahead=self.write_ahead,
        )


class OperationInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A spec without its handler and types: what `gormes ops list --json` prints."""

    name: str
    description: str
    trust: list[str]
    mutating: bool
    idempotent: bool
    prompt_visible: bool
    timeout: float
    audit_kind: str
    doctor_checks: list[str]
    requires_approval: bool = False
    operator_mcp: bool = False
    write_ahead: bool = False


class ToolSchema(msgspec.Struct, frozen=True, kw_only=True):
    """A model tool in a provider-neutral shape: `parameters` is the JSON schema
    of the operation's input (an object schema, `$defs` inlined under it)."""

    name: str
    description: str
    parameters: dict[str, Any]
