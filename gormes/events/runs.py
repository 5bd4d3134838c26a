"""Run events: everything an agent run observed, on the run's own stream `run-<id>`.

A run reaches the outside world only through its `RunContext`
(gormes/actors/runs/context.py). Each thing the context observes for the handler
(a model reply, a tool result, inbox messages, a clock reading, a random draw, a
child's outcome...) is appended here BEFORE the handler sees it. Every such
observation carries `seq`: 1, 2, 3... in the order the handler asked, per run.
Replay walks the observations by `seq` and serves them back to the same handler.

Events that are not observations carry no `seq`: `run.started`, the terminal
`run.completed | run.failed | run.cancelled`, `run.suspended`/`run.resumed`
(declared, never written: a job attempt that resumes an earlier run is a new
run with `resumed_from`, see decision 0011) and `run.message_sent` (written by
whoever sends the run a message).

Only events-layer types appear here: the providers' neutral model types are
converted to and from `RecordedReply` by gormes/actors/runs/manager.py, so no provider's
wire format and no actors-layer class reaches the log.

Run events (and the structs inside them) are declared `gc=False`: they hold JSON
data only, which cannot form reference cycles, so the garbage collector need not
track the thousands of them a long run's replay decodes at once.

Tokens are counted once: a model turn's usage is in its `run.llm_turn`; usage the
handler reports itself is `run.tokens_added`; a child's total is in the parent's
`run.child_finished`. A run's total is the sum of the three.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import msgspec

from gormes.events.base import Event
from gormes.events.approvals import RunApprovalDecided, RunApprovalRequested
from gormes.events.jobs import Tokens

RunStatus = Literal["running", "suspended", "completed", "failed", "cancelled"]
RUN_TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
ToolOutcomeKind = Literal["ok", "error", "denied"]
ChildStatus = Literal["completed", "failed", "cancelled"]
LogLevel = Literal["debug", "info", "warning", "error"]


def run_stream(run_id: str) -> str:
    return f"run-{run_id}"


def canonical_arguments(arguments: Any) -> tuple[str, str]:
    """A tool call's arguments as (canonical JSON text, sha256 hex of that text).

    `arguments` is a JSON-compatible value, or JSON text as a model sends it (text
    is decoded first, so `{"b":1, "a":2}` and `{"a":2,"b":1}` hash the same).
    Raises `msgspec.DecodeError` for text that is not JSON.
    """
    value = msgspec.json.decode(arguments) if isinstance(arguments, (str, bytes)) else arguments
    text = _sorted_json.encode(value)
    if len(text) > _ARGUMENT_HASHES_TEXT_MAX:
        return text.decode(), hashlib.sha256(text).hexdigest()
    known = _argument_hashes.get(text)
    if known is None:
        if len(_argument_hashes) >= _ARGUMENT_HASHES_MAX:
            _argument_hashes.clear()
        known = _argument_hashes[text] = (text.decode(), hashlib.sha256(text).hexdigest())
    return known


_sorted_json = msgspec.json.Encoder(order="sorted")
# Agents call the same tools with the same arguments again and again (a replay of a
# long run, every turn): the canonical text's hash is kept, for short texts only.
_argument_hashes: dict[bytes, tuple[str, str]] = {}
_ARGUMENT_HASHES_MAX = 4096
_ARGUMENT_HASHES_TEXT_MAX = 512


# -- recorded copies of what a run saw -------------------------------------------


class RecordedToolCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A tool call as the model asked for it; `arguments` is the JSON text it sent."""

    id: str
    name: str
    arguments: str


class RecordedReply(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A neutral copy of a model reply (an assistant message and how it ended)."""

    content: str
    tool_calls: tuple[RecordedToolCall, ...] = ()
    finish_reason: str = "stop"
    model: str = ""


class RecordedMessage(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """A message of a model request as recorded (the providers' neutral `Message`)."""

    role: str
    content: str
    tool_calls: tuple[RecordedToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


class RecordedToolDigest(msgspec.Struct, frozen=True, kw_only=True, gc=False, array_like=True):
    """A tool a model request offered: its name and a digest of its whole schema (the
    first 16 hex digits of the sha256 of its canonical JSON: name, description,
    parameters), enough to say which schema changed."""

    name: str
    digest: str


class RecordedRequest(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """Enough of a model request for replay to say what differs when the code asks
    another one (its hash alone says only that it differs).

    Each is recorded relative to the previous request recorded on the same run
    stream (by seq: model turns and failed attempts alike), so a run's requests cost
    bytes linear in its length: `shared` leading messages are the previous
    request's, `messages` are the ones after them, and `tools` is None when the
    tools offered are the previous request's. A request with `shared == 0` and
    `tools` given stands alone (a run's first, or the first a continuation asked live).
    """

    shared: int = 0
    messages: tuple[RecordedMessage, ...] = ()
    tools: tuple[RecordedToolDigest, ...] | None = None
    temperature: float | None = None
    max_tokens: int | None = None


class RecordedTool(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An operation that is not in the code (a tool of an external MCP server) as a
    run could be offered it: what replay needs to rebuild the same tool schemas, so
    the same model requests, without starting the server."""

    name: str  # the neutral operation name: mcp.<server>.<tool>
    description: str
    parameters: dict[str, Any]  # the tool's input schema, as the server listed it
    trust: tuple[str, ...]  # the trust classes the configuration granted
    source: str  # where it came from: "mcp:<server>"


class InboxItem(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A message as the run read it. `sent_at` is ms since the epoch, as the sender
    recorded it; `sender` is "operator", "run:<id>", "job:<id>" or a free name."""

    id: str
    sender: str
    payload: Any
    sent_at: int


class ObservationReplaced(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The one observation a fork replaced (decision 0034): the source's observation
    at the fork's position, its `seq` and type, the sha256 of its canonical JSON
    (`original_hash`), and what stands in its place in the fork: `kind` "reply"
    (`value` is the given reply, a `RecordedReply`'s fields), "tool_result" (`value`
    is the result) or "tool_error" (`value` is the error text)."""

    seq: int
    type: str
    original_hash: str
    kind: Literal["reply", "tool_result", "tool_error"]
    value: Any = None


class ForkOrigin(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """Where a forked (or resumed) run came from: the source run and the log position
    its observations were copied up to; `replaced`, in a fork that changed what was
    observed at that position, says what it replaced and with what."""

    run_id: str
    position: int
    replaced: ObservationReplaced | None = None


class RunProcess(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The process that drives a run. A run records its own end, so a run whose
    process died (SIGKILL, a crash) has none; on the host it ran on, this tells
    such a run from a live one (gormes/actors/runs/process.py)."""

    host: str  # the hostname, for people
    machine: str = ""  # /etc/machine-id where there is one: the machine, for the check
    boot: str = ""  # the kernel's boot id: another one means the machine restarted since
    pid_namespace: str = ""  # another container's pids are not ours to look up
    pid: int
    started_at: float  # the process's start (epoch seconds): a reused pid has another


# -- lifecycle --------------------------------------------------------------------


class RunStarted(Event, tag="run.started", kw_only=True, gc=False):
    run_id: str
    handler: str
    handler_version: str  # sha256 of the handler function's source
    input: Any = None
    parent_run_id: str | None = None
    depth: int = 0  # 0 for a top-level run, parent's + 1 for a subagent
    deadline_s: float | None = None  # a budget relative to the start; None: no deadline
    tools: tuple[str, ...] | None = None  # the allowlist; None: every op the trust allows
    model: str | None = None  # provider spec, "scripted:PATH" or "openai:MODEL"
    max_iterations: int | None = None
    trust: str = "agent"  # the class its tool calls are made with: its submitter's or narrower
    job_id: str | None = None
    forked_from: ForkOrigin | None = None
    max_depth: int = 3
    # The spawns the run may make (a subagent's is its parent's cap); None in runs
    # recorded before the cap existed, which had none.
    max_children: int | None = None
    # The runs its whole tree may hold, root included (a subagent's is its tree's,
    # decision 0063); None in runs recorded before the cap existed, which had none.
    max_tree_runs: int | None = None
    # A later attempt of the same agent job continuing this earlier run (decision 0011):
    # its observations up to the position were copied (replayed, not redone).
    resumed_from: ForkOrigin | None = None
    # The process that drives the run; None in runs recorded before it was kept.
    process: RunProcess | None = None
    # The memory scope its tool calls are pinned to (a gateway client's run: that
    # client's, decision 0016); None: its trust class's default, and in runs
    # recorded before it was kept.
    scope: str | None = None
    # The external tools (not in the code: MCP servers') among those its trust
    # class and allowlist allowed when it started; replay offers the same ones.
    external_tools: tuple[RecordedTool, ...] = ()
    # The budgets its model turns are charged to (decision 0030); its subagents carry the same.
    budgets: tuple[str, ...] = ()


class RunCompleted(Event, tag="run.completed", kw_only=True, gc=False):
    result: Any = None
    tokens: Tokens = Tokens()  # the run's total, its children's included


class RunFailed(Event, tag="run.failed", kw_only=True, gc=False):
    error: str
    tokens: Tokens = Tokens()


class RunCancelled(Event, tag="run.cancelled", kw_only=True, gc=False):
    reason: str = "cancelled"
    tokens: Tokens = Tokens()


class RunSuspended(Event, tag="run.suspended", kw_only=True, gc=False):
    """Not written (kept so that logs holding it still read): resuming an agent job's
    run is a new run with `run.started.resumed_from` (decision 0011); the attempt
    that stopped ends its run as `run.cancelled`."""

    reason: str
    job_attempt: int | None = None


class RunResumed(Event, tag="run.resumed", kw_only=True, gc=False):
    """Not written (kept so that logs holding it still read); see `RunSuspended`."""

    replayed_seq: int
    job_attempt: int | None = None


# -- observations (each with its seq) --------------------------------------------


class RunLlmTurn(Event, tag="run.llm_turn", kw_only=True, gc=False):
    seq: int
    # gormes.providers.base.request_hash of the request: `v2:` and 64 hex digits; 64
    # hex digits alone in a run recorded before decision 0064 (`request_hash_v1`)
    request_hash: str
    model: str
    message_count: int
    reply: RecordedReply
    usage: Tokens
    duration_ms: int = 0
    # What the request held, relative to the run's previous one; None in runs
    # recorded before it was kept (their divergences name the hash only).
    request: RecordedRequest | None = None
    # Prompt tokens this turn wrote into the provider's cache (part of usage.input).
    # Also in `usage.cache_write` since `Tokens` has it (decision 0035); a turn
    # recorded before has it only here: read a turn's usage with `turn_usage`.
    cache_write: int = 0
    # The `max_tokens` the provider was sent in place of the request's: the output
    # ceiling of the turn's budgets (decision 0065). None: sent as the handler asked
    # (no budget, or a bound within it already); `request_hash` is the handler's.
    sent_max_tokens: int | None = None


class RunLlmFailed(Event, tag="run.llm_failed", kw_only=True, gc=False):
    """One failed attempt at a model turn. Retryable failures are retried by the
    context (with a bounded backoff) and each is its own observation; the turn that
    finally succeeds is a `run.llm_turn` with the same request_hash."""

    seq: int
    request_hash: str
    error: str
    retryable: bool
    attempt: int = 1
    model: str = ""
    error_type: str = "ProviderError"  # the exception class raised (InvalidModelReply...)
    request: RecordedRequest | None = None  # as in `RunLlmTurn`
    sent_max_tokens: int | None = None  # as in `RunLlmTurn`
    # what the server reported using for a reply gormes could not use (a tool call
    # cut off at max_tokens), which the API bills; None: it reported nothing (decision 0069)
    usage: Tokens | None = None


class RunToolCalled(Event, tag="run.tool_called", kw_only=True, gc=False):
    seq: int
    operation: str
    arguments: str  # canonical JSON text (or the raw text when it was not JSON)
    args_hash: str
    outcome: ToolOutcomeKind
    result: Any = None
    error: str | None = None
    error_type: str | None = None  # the executor's exception class, when not "ok"
    duration_ms: int = 0


class RunInboxRead(Event, tag="run.inbox_read", kw_only=True, gc=False):
    """The messages one `inbox()` call returned; also their read receipt."""

    seq: int
    messages: tuple[InboxItem, ...] = ()


class RunClockRead(Event, tag="run.clock_read", kw_only=True, gc=False):
    seq: int
    value: float  # seconds since the epoch


class RunRandomDrawn(Event, tag="run.random_drawn", kw_only=True, gc=False):
    seq: int
    value: float  # in [0, 1)


class RunProgressed(Event, tag="run.progress", kw_only=True, gc=False):
    seq: int
    progress: Any


class RunTokensAdded(Event, tag="run.tokens_added", kw_only=True, gc=False):
    """Usage the handler reported itself (not from `llm()`, which records its own)."""

    seq: int
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0  # part of `input`, as `Tokens.cache_write`


class RunLogged(Event, tag="run.logged", kw_only=True, gc=False):
    seq: int
    level: LogLevel = "info"
    message: str


class RunChildSpawned(Event, tag="run.child_spawned", kw_only=True, gc=False):
    seq: int
    child_run_id: str
    handler: str
    input: Any = None
    tools: tuple[str, ...] | None = None
    model: str | None = None


class RunSpawnRefused(Event, tag="run.spawn_refused", kw_only=True, gc=False):
    """A spawn refused by what the run's own stream cannot tell again: its tree's
    cap on runs, reached by whichever of the tree's runs spawned first (decision
    0063). Replay serves it; the refusals a run's own record decides (the depth
    cap, its cap on spawns, an unknown handler) are not recorded."""

    seq: int
    handler: str
    input: Any = None
    tools: tuple[str, ...] | None = None
    model: str | None = None
    reason: str


class RunChildFinished(Event, tag="run.child_finished", kw_only=True, gc=False):
    """Recorded in the PARENT when the parent's handler observed the child's end
    (`await child.result()`), so the parent's order does not depend on timing."""

    seq: int
    child_run_id: str
    status: ChildStatus
    result: Any = None
    error: str | None = None
    tokens: Tokens = Tokens()  # the child's total, its own children's included


# -- written by the run, not observed -------------------------------------------


class RunLlmCut(Event, tag="run.llm_cut", kw_only=True, gc=False):
    """A model turn cut short after its request left (the run's deadline, a cancel,
    its job paused or cancelled, a scope of the handler's own): the usage its stream
    had reported by then, which the API bills for a reply it began (decision 0080).
    Not an observation: the handler was given nothing (the cancel reached it
    instead), so it has no `seq` of its own; forks and resumes pass over it (a
    resumed run makes the turn again), and replay waits at that turn for the
    handler's own scope where the run went on after it. Its run's, job's and
    budgets' tokens, its cost and the metrics count its usage."""

    at_seq: int  # the seq the turn's record would have had: where in the run it was cut
    request_hash: str
    model: str = ""
    usage: Tokens | None = None  # what the stream had reported; None: nothing (no event had come)
    duration_ms: int = 0  # from the request's start to the cut


# -- written by others -------------------------------------------------------------


class RunMessageSent(Event, tag="run.message_sent", kw_only=True, gc=False):
    """A message for the run's inbox, appended to the run's stream by its sender."""

    message_id: str
    sender: str
    payload: Any = None
    sent_at: int  # ms since the epoch


RunObservation = (
    RunLlmTurn | RunLlmFailed | RunToolCalled | RunInboxRead | RunClockRead
    | RunRandomDrawn | RunProgressed | RunTokensAdded | RunLogged | RunChildSpawned
    | RunSpawnRefused | RunChildFinished | RunApprovalRequested | RunApprovalDecided
)
RunEvent = (
    RunStarted | RunCompleted | RunFailed | RunCancelled | RunSuspended | RunResumed
    | RunObservation | RunLlmCut | RunMessageSent
)
OBSERVATION_TYPES: tuple[type, ...] = (
    RunLlmTurn, RunLlmFailed, RunToolCalled, RunInboxRead, RunClockRead, RunRandomDrawn,
    RunProgressed, RunTokensAdded, RunLogged, RunChildSpawned, RunSpawnRefused, RunChildFinished,
    RunApprovalRequested, RunApprovalDecided,  # gormes/events/approvals.py (decision 0033)
)
TERMINAL_TYPES: tuple[type, ...] = (RunCompleted, RunFailed, RunCancelled)


NO_TOKENS = Tokens()


def tokens_of(event: Event) -> Tokens:
    """The tokens one event adds to its run's total (`NO_TOKENS` for most events)."""
    if isinstance(event, RunLlmTurn):
        return turn_usage(event)
    if isinstance(event, RunLlmFailed):
        return event.usage or NO_TOKENS
    if isinstance(event, RunLlmCut):
        return event.usage or NO_TOKENS
    if isinstance(event, RunTokensAdded):
        return Tokens(input=event.input, output=event.output, cache_read=event.cache_read,
                      cache_write=event.cache_write)
    if isinstance(event, RunChildFinished):
        return event.tokens
    return NO_TOKENS


def turn_usage(turn: RunLlmTurn) -> Tokens:
    """A model turn's usage, its cache writes included: a turn recorded before
    `Tokens` had them kept them only in `RunLlmTurn.cache_write` (decision 0035)."""
    u = turn.usage
    if turn.cache_write <= u.cache_write:
        return u
    return Tokens(input=u.input, output=u.output, cache_read=u.cache_read, cache_write=turn.cache_write,
                  reasoning=u.reasoning)
