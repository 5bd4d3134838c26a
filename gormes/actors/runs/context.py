"""`RunContext`: the only door a run handler has to the outside world.

A run handler is an async function `(ctx, input) -> result`:

    @run_handler("summarize")
    async def summarize(ctx: RunContext, input: dict) -> str:
        text = await ctx.tool("fs.read", {"path": input["path"]})
        reply = await ctx.llm(ModelRequest(model=ctx.model_name, messages=(...)))
        return reply.message.content

Every method that brings something in (a model reply, a tool result, inbox
messages, the time, a random number, a child's outcome) records it as an event
on the run's stream (gormes/events/runs.py), durably, BEFORE returning it, with
the next `seq` of the run. A handler that reads the world only through its
context is therefore replayable exactly: the replay context implements this
same interface by serving the recorded events back in `seq` order and checking
each request against the record (operation + args hash, model request hash).

Rules a handler must keep for replay to be exact:
- no wall clock, randomness, file or network I/O except through `ctx`;
- the result is JSON-compatible;
- concurrency only through `spawn`: `run.child_spawned` is recorded in the order
  the handler calls `spawn`, `run.child_finished` in the order it awaits
  `child.result()`.

The live implementation is `gormes.actors.runs.manager.LiveRunContext`.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import textwrap
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from gormes.errors import GormesError, UserError
from gormes.events.jobs import Tokens
from gormes.events.runs import ChildStatus, InboxItem, LogLevel, ToolOutcomeKind

if TYPE_CHECKING:
    from gormes.providers.base import ModelReply, ModelRequest, ToolSpec

DEFAULT_MAX_DEPTH = 3
DEFAULT_MAX_CHILDREN = 100  # spawns one run may make (GORMES_MAX_CHILDREN)
MAX_CHILDREN_ENV = "GORMES_MAX_CHILDREN"


# -- what the context hands back ---------------------------------------------------


class ChildOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """How a child run ended, as its parent observed it (`run.child_finished`)."""

    run_id: str
    status: ChildStatus
    result: Any = None
    error: str | None = None
    tokens: Tokens = Tokens()  # the child's total, its own children's included


class ToolCallFailed(GormesError):
    """`ctx.tool()` did not give a result: the operation failed (`outcome="error"`)
    or was refused (`"denied"`: not in the run's allowlist, not allowed to the run's
    trust class, unknown). Either way it was recorded; a denied call never ran."""

    def __init__(self, operation: str, outcome: ToolOutcomeKind, message: str) -> None:
        super().__init__(f"{operation}: {message}")
        self.operation = operation
        self.outcome = outcome
        self.message = message


def spawn_cap_refusal(run_id: str, made: int, cap: int | None) -> str | None:
    """Why one more spawn is refused by the run's cap on spawns, or None."""
    if cap is None or made < cap:
        return None
    return f"spawn cap reached: run {run_id} has spawned {made} subagents, its cap (max_children {cap})"


class SpawnRefused(UserError):
    """`ctx.spawn()` refused before starting anything: the depth cap or the run's
    cap on spawns is reached, or no run handler has that name, or no event could
    record what it was given (a lone surrogate, input that is no JSON: decision
    0078) (nothing recorded on the run's stream), or the tree's cap on runs is
    reached (`run.spawn_refused` recorded: decision 0063)."""


class ChildRun(ABC):
    """A handle on a child run started by `ctx.spawn`; it lives in the parent's nursery."""

    @property
    @abstractmethod
    def run_id(self) -> str: ...

    @property
    @abstractmethod
    def handler(self) -> str: ...

    @abstractmethod
    async def result(self) -> ChildOutcome:
        """Wait for the child to end and record `run.child_finished` in the PARENT
        (once; later calls return the same outcome without recording again).

        Never raises for the child's failure or cancellation: that is the outcome's
        `status`. Raises `trio.Cancelled` if the parent itself is cancelled.
        """

    @abstractmethod
    async def cancel(self, reason: str = "cancelled by parent") -> None:
        """Cancel the child (and its own children). Its outcome is then "cancelled"
        unless it had already ended; the parent still learns it via `result()`."""


# -- the context --------------------------------------------------------------------


class RunIdentity:
    """The what-the-run-is properties of a `RunContext`, read from `_identity`: the
    run's `run.started` event (replay) or its live run (`LiveRun`), which name them
    alike. Mix in before `RunContext`."""

    _identity: Any

    @property
    def run_id(self) -> str:
        return self._identity.run_id  # type: ignore[no-any-return]

    @property
    def handler(self) -> str:
        return self._identity.handler  # type: ignore[no-any-return]

    @property
    def input(self) -> Any:
        return self._identity.input

    @property
    def depth(self) -> int:
        return self._identity.depth  # type: ignore[no-any-return]

    @property
    def max_depth(self) -> int:
        return self._identity.max_depth  # type: ignore[no-any-return]

    @property
    def max_children(self) -> int | None:
        return self._identity.max_children  # type: ignore[no-any-return]

    @property
    def max_tree_runs(self) -> int | None:
        return self._identity.max_tree_runs  # type: ignore[no-any-return]

    @property
    def parent_run_id(self) -> str | None:
        return self._identity.parent_run_id  # type: ignore[no-any-return]

    @property
    def trust(self) -> str:
        return self._identity.trust  # type: ignore[no-any-return]

    @property
    def allowed_tools(self) -> tuple[str, ...] | None:
        return self._identity.tools  # type: ignore[no-any-return]

    @property
    def model(self) -> str | None:
        return self._identity.model  # type: ignore[no-any-return]

    @property
    def max_iterations(self) -> int | None:
        return self._identity.max_iterations  # type: ignore[no-any-return]


class RunContext(ABC):
    """What a run handler gets as `ctx`. Every `async` method records before returning."""

    # -- what the run is (fixed at start, from `run.started`) --------------------------

    @property
    @abstractmethod
    def run_id(self) -> str: ...

    @property
    @abstractmethod
    def handler(self) -> str: ...

    @property
    @abstractmethod
    def input(self) -> Any:
        """The run's input, as recorded in `run.started`."""

    @property
    @abstractmethod
    def depth(self) -> int:
        """0 for a top-level run; a subagent's depth is its parent's + 1."""

    @property
    @abstractmethod
    def max_depth(self) -> int:
        """The depth cap: `spawn` is refused when `depth + 1 > max_depth`."""

    @property
    @abstractmethod
    def max_children(self) -> int | None:
        """The spawns this run may make (None: no cap, a run recorded before it)."""

    @property
    @abstractmethod
    def max_tree_runs(self) -> int | None:
        """The runs this run's tree may hold, its root included (None: no cap, a
        run recorded before it; gormes/actors/runs/tree_cap.py)."""

    @property
    @abstractmethod
    def parent_run_id(self) -> str | None: ...

    @property
    @abstractmethod
    def trust(self) -> str:
        """The trust class tool calls are made with: the submitter's, or narrower
        (a subagent's: the narrower of its parent's and "child-agent")."""

    @property
    @abstractmethod
    def allowed_tools(self) -> tuple[str, ...] | None:
        """The run's tool allowlist; None means every prompt-visible operation its
        trust class may use."""

    @property
    @abstractmethod
    def model(self) -> str | None:
        """The provider spec of the run ("scripted:PATH", "openai:MODEL"), if any."""

    @property
    @abstractmethod
    def model_name(self) -> str:
        """The model name to put in `ModelRequest.model` (the provider's `model`)."""

    @property
    @abstractmethod
    def max_iterations(self) -> int | None: ...

    # -- observations ------------------------------------------------------------------

    @abstractmethod
    def tool_schemas(self) -> tuple[ToolSpec, ...]:
        """The tools this run may offer its model: the prompt-visible operations its
        trust class may use, narrowed to its allowlist. Not recorded (it depends on
        code only); it is part of every `llm` request, hence of its hash."""

    @abstractmethod
    async def llm(self, request: ModelRequest) -> ModelReply:
        """Ask the run's model. Records `run.llm_turn` (request hash, reply, usage)
        and counts the usage in the run's tokens (and its job's, for a job run).

        A retryable `ProviderError` is retried with a bounded backoff, each failure
        recorded as `run.llm_failed`; a non-retryable one (or the last retry) is
        recorded the same way and then raised.
        """

    @abstractmethod
    async def tool(self, name: str, arguments: Any) -> Any:
        """Call operation `name` through the ops executor with the run's trust class.

        `arguments` is a JSON value or JSON text (as a model sends it). Records
        `run.tool_called` (operation, canonical arguments, args hash, outcome,
        result or error) and returns the result, or raises `ToolCallFailed`
        (outcome "error" or "denied"). A tool outside the allowlist is denied
        without reaching the executor.
        """

    @abstractmethod
    async def spawn(
        self,
        handler: str,
        input: Any,
        *,
        tools: tuple[str, ...] | list[str] | None = None,
        model: str | None = None,
        deadline_s: float | None = None,
    ) -> ChildRun:
        """Start a child run in this run's nursery and return at once.

        Records `run.child_spawned` (in call order). The child gets depth + 1, the
        narrower of the parent's trust and "child-agent" (gormes.ops.spec.narrower),
        the parent's memory scope, the parent's model unless `model` is given, an
        allowlist that is `tools` narrowed to the parent's own allowlist, and a
        deadline no later than the parent's. Cancelling this run cancels the child. Raises
        `SpawnRefused` past the depth cap or the spawn cap, or for an unknown handler, or for what no
        event could record (a str with a lone surrogate, input that is no JSON; audited `invalid`)
        (nothing recorded on the run's stream), or past the tree's cap on runs (`run.spawn_refused`
        recorded); a live run audits each refusal, and each spawn it starts.
        """

    async def spawn_invalid(self, arguments: str, reason: str) -> None:  # noqa: B027 - a live run overrides it
        """A spawn the handler refused before asking (`arguments` that do not
        validate, as the model sent them): a live run audits it as invalid
        (gormes/actors/runs/spawn_audit.py); replay has nothing to serve or write."""

    @abstractmethod
    async def inbox(self) -> list[InboxItem]:
        """Messages sent to the run (or to its job) not read yet, oldest first;
        records `run.inbox_read` (the read receipt), even when empty."""

    @abstractmethod
    async def progress(self, progress: Any) -> None:
        """Record `run.progress` (any JSON), also on the run's job if it has one."""

    @abstractmethod
    async def tokens(self, input: int = 0, output: int = 0, cache_read: int = 0, cache_write: int = 0) -> None:
        """Record usage not seen by `llm()` (`run.tokens_added`). `cache_write` is
        recorded on the event; the run's `Tokens` total does not count it yet."""

    @abstractmethod
    async def now(self) -> float:
        """Seconds since the epoch; records `run.clock_read`."""

    @abstractmethod
    async def random(self) -> float:
        """A float in [0, 1); records `run.random_drawn`."""

    @abstractmethod
    async def log(self, message: str, level: LogLevel = "info") -> None:
        """Record `run.logged`."""


# -- run handlers --------------------------------------------------------------------

RunHandler = Callable[[RunContext, Any], Awaitable[Any]]


_versions: weakref.WeakKeyDictionary[Any, tuple[Any, str]] = weakref.WeakKeyDictionary()


def handler_version(fn: Callable[..., Any]) -> str:
    """sha256 (hex) of the handler's name (its `__qualname__`) and the whole source
    file of its module, recorded in `run.started` so replay can say when the code the
    handler runs changed since the recording: a change to a helper in the same module
    is flagged, not only one to the function itself. Falls back to the function's
    own source, then its bytecode, when the module's file cannot be read.

    Computed once per function (and code object): reading source costs more than
    a whole agent step. The cached value is also the more accurate one: it is the
    source of the code that is running (as first read), even when the file is
    edited on disk later."""
    code = getattr(fn, "__code__", None)
    try:
        cached = _versions.get(fn)
    except TypeError:  # not hashable or not weak-referenceable: computed each time
        return _handler_version(fn)
    if cached is not None and cached[0] is code:
        return cached[1]
    version = _handler_version(fn)
    with contextlib.suppress(TypeError):
        _versions[fn] = (code, version)
    return version


def _module_source(fn: Callable[..., Any]) -> bytes | None:
    try:
        path = inspect.getsourcefile(inspect.unwrap(fn))
    except (TypeError, ValueError):
        return None
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _handler_version(fn: Callable[..., Any]) -> str:
    source = _module_source(fn)
    if source is None:
        try:
            source = textwrap.dedent(inspect.getsource(fn)).encode()
        except (OSError, TypeError):
            code = getattr(fn, "__code__", None)
            source = code.co_code if code is not None else repr(fn).encode()
    name = getattr(fn, "__qualname__", "").encode()
    return hashlib.sha256(name + b"\n" + source).hexdigest()


class UnknownRunHandler(UserError):
    """No run handler has that name."""


class InvalidRunInput(UserError):
    """Input the handler's declared input type refuses (an unknown field, a missing one)."""


class RunHandlerRegistry:
    """Run handler names mapped to their functions. The built-in "agent" is
    registered when gormes.actors.runs.agent is imported (on first lookup)."""

    def __init__(self, handlers: dict[str, RunHandler] | None = None,
                 need_a_model: frozenset[str] | set[str] = frozenset(),
                 input_types: dict[str, type] | None = None) -> None:
        self._handlers: dict[str, RunHandler] = dict(handlers or {})
        self._need_a_model: set[str] = set(need_a_model)
        self._input_types: dict[str, type] = dict(input_types or {})

    def register(self, name: str, fn: RunHandler, *, needs_model: bool = False,
                 input_type: type | None = None) -> RunHandler:
        if not name or not name.strip():
            raise UserError("a run handler needs a non-empty name")
        if not inspect.iscoroutinefunction(fn):
            raise UserError(f"run handler {name!r} must be an async function")
        self._handlers[name] = fn
        if needs_model:
            self._need_a_model.add(name)
        else:
            self._need_a_model.discard(name)
        if input_type is not None:
            self._input_types[name] = input_type
        else:
            self._input_types.pop(name, None)
        return fn

    def check_input(self, name: str, input: Any, what: str = "input") -> None:
        """Refuse `input` its handler's declared input type would refuse when the run
        starts (InvalidRunInput); a handler that declares none takes any JSON."""
        _load_builtins()
        input_type = self._input_types.get(name)
        if input_type is None:
            return
        try:
            msgspec.convert(input, input_type)
        except msgspec.ValidationError as exc:
            raise InvalidRunInput(f"run handler {name!r} {what}: {exc}") from None

    def needs_model(self, name: str) -> bool:
        """Whether the handler called `name` cannot run without a model: a run of it
        started without one is refused before anything is recorded."""
        _load_builtins()
        return name in self._need_a_model

    def get(self, name: str) -> RunHandler:
        _load_builtins()
        fn = self._handlers.get(name)
        if fn is None:
            known = ", ".join(self.names()) or "none"
            raise UnknownRunHandler(
                f"no run handler named {name!r} (known: {known}): --import the module or file that declares it"
            )
        return fn

    def names(self) -> list[str]:
        _load_builtins()
        return sorted(self._handlers)

    def copy(self) -> RunHandlerRegistry:
        _load_builtins()
        return RunHandlerRegistry(self._handlers, self._need_a_model, self._input_types)

    def __contains__(self, name: object) -> bool:
        _load_builtins()
        return name in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


run_handlers = RunHandlerRegistry()


def run_handler(
    name: str, *, registry: RunHandlerRegistry | None = None, needs_model: bool = False,
    input_type: type | None = None,
) -> Callable[[RunHandler], RunHandler]:
    """Decorator: register an async `(ctx, input) -> result` run handler.
    `needs_model`: it calls `ctx.llm`, so a run started without a model is refused
    before anything is recorded (instead of failing at its first model turn).
    `input_type`: a msgspec type its input must convert to; a fork's or an eval's
    `--set` and an agent job's data are checked against it before anything is
    recorded (decision 0090)."""

    def decorate(fn: RunHandler) -> RunHandler:
        return (registry or run_handlers).register(name, fn, needs_model=needs_model, input_type=input_type)

    return decorate


def _load_builtins() -> None:
    # agent.py registers the built-in "agent" here when imported, and imports this
    # module to do so: it is loaded on the first lookup, not at this module's import.
    import gormes.actors.runs.agent  # noqa: F401

    # The agent's input type is declared here, not in agent.py: that file's whole
    # source is the agent's handler version, which every recorded run of it names.
    if "agent" not in run_handlers._input_types:
        run_handlers._input_types["agent"] = gormes.actors.runs.agent.AgentInput
