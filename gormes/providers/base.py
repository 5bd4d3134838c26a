"""The neutral model interface: what a run asks a model and what it gets back.

Every provider speaks these types and nothing else, so no provider's wire format
reaches the log. A run records `request_hash(request)` with each model turn;
replay recomputes it from the code's request and compares.

    provider = open_provider("scripted:demo.json")
    reply = await provider.complete(ModelRequest(model=provider.model, messages=(...), tools=()))
    reply.message.content, reply.message.tool_calls, reply.usage
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

from gormes.errors import GormesError

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A model's request to call one tool; `arguments` is JSON text, as models send it."""

    id: str
    name: str
    arguments: str


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a conversation.

    `tool_calls` only on assistant messages; `tool_call_id` (and optionally the
    tool's `name`) only on tool messages, naming the call they answer.
    """

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool offered to the model; `parameters` is a JSON schema object."""

    name: str
    description: str
    parameters: dict[str, Any]


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens one model turn used, as the provider reported them.

    `input` counts every prompt token, the cached ones included; `cache_read` is
    the part of `input` served from the provider's prompt cache, and `cache_write`
    the part written into it by this turn (Anthropic bills those apart; OpenAI
    caches without a charge and reports none). A provider whose wire counts cached
    tokens apart from its input (Anthropic's `input_tokens`) adds them back in.
    `reasoning` is the part of `output` a reasoning model spent thinking, where the
    provider reports it (OpenAI's `completion_tokens_details.reasoning_tokens`;
    Anthropic's wire has no such count: its thinking is in `output_tokens`, 0 here).
    """

    input: int
    output: int
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            reasoning=self.reasoning + other.reasoning,
        )


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything that decides a model's reply. Its hash identifies a turn in replay."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    temperature: float | None = None
    max_tokens: int | None = None


class ModelReply(msgspec.Struct, frozen=True, kw_only=True):
    """The model's answer: an assistant message with content and/or tool calls."""

    message: Message
    usage: Usage
    finish_reason: str
    model: str


_sorted = msgspec.json.Encoder(order="sorted")

# A request's canonical JSON is assembled field by field in this order (msgspec's
# order="sorted" for a Struct: its fields by name, every one present) so that its
# tools, the same for every turn of a run and most of its bytes, are encoded once.
_REQUEST_FIELDS = ("max_tokens", "messages", "model", "temperature", "tools")
assert tuple(sorted(ModelRequest.__struct_encode_fields__)) == _REQUEST_FIELDS, "update request_json"
_MAX_TOKENS, _MESSAGES, _MODEL, _TEMPERATURE, _TOOLS = (
    (b"{" if i == 0 else b",") + _sorted.encode(name) + b":" for i, name in enumerate(_REQUEST_FIELDS)
)

_tool_json_cache: dict[int, tuple[ToolSpec, bytes]] = {}
_TOOL_JSON_CACHE_MAX = 1024


def _tool_json(tool: ToolSpec) -> bytes:
    """A tool's canonical JSON, kept per ToolSpec object. A ToolSpec is frozen and its
    `parameters` must not be changed once it is made (the registry makes each
    run's tools once, see `run_live.tool_specs`)."""
    hit = _tool_json_cache.get(id(tool))
    if hit is not None and hit[0] is tool:
        return hit[1]
    data = _sorted.encode(tool)
    if len(_tool_json_cache) >= _TOOL_JSON_CACHE_MAX:
        _tool_json_cache.clear()
    _tool_json_cache[id(tool)] = (tool, data)
    return data


_tools_json_cache: dict[tuple[int, ...], tuple[tuple[ToolSpec, ...], bytes, bytes]] = {}
_TOOLS_JSON_CACHE_MAX = 256  # distinct lists of tools (not runs): each holds ~10 KB of JSON


def _tools_entry(tools: tuple[ToolSpec, ...]) -> tuple[tuple[ToolSpec, ...], bytes, bytes]:
    """The tools' canonical JSON and the JSON string of its sha256 (hex), each made
    once for a list of tools. Kept by the ToolSpec objects the tuple holds, not by
    the tuple: an agent sends the same tools every turn, and every run with the
    same trust and allowlist offers the same ToolSpec objects in a tuple of its own
    (the agent loop adds its spawn tool), so ten thousand runs share one entry. The
    entry keeps its ToolSpecs alive, so their ids cannot be reused while it is kept."""
    key = tuple(map(id, tools))
    hit = _tools_json_cache.get(key)
    if hit is not None:
        return hit
    if type(tools) is not tuple or not all([type(t) is ToolSpec for t in tools]):
        data = _sorted.encode(tools)
        return tools, data, _digest_json(data)
    data = b"[" + b",".join([_tool_json(t) for t in tools]) + b"]" if tools else b"[]"
    if len(_tools_json_cache) >= _TOOLS_JSON_CACHE_MAX:
        _tools_json_cache.clear()
    entry = _tools_json_cache[key] = (tools, data, _digest_json(data))
    return entry


def _digest_json(data: bytes) -> bytes:
    return b'"' + hashlib.sha256(data).hexdigest().encode() + b'"'


def tools_json(tools: tuple[ToolSpec, ...]) -> bytes:
    """`msgspec.json.encode(tools, order="sorted")`, each ToolSpec encoded once, and
    each list of them joined once (see `_tools_entry`)."""
    return _tools_entry(tools)[1] if tools else b"[]"


def _request_head(request: ModelRequest) -> bytes:
    """A request's canonical JSON up to its tools' value: every field but the tools,
    keys sorted, and the `"tools":` key."""
    enc = _sorted.encode
    return b"".join((
        _MAX_TOKENS, enc(request.max_tokens), _MESSAGES, enc(request.messages), _MODEL,
        enc(request.model), _TEMPERATURE, enc(request.temperature), _TOOLS,
    ))


def request_json(request: ModelRequest) -> bytes:
    """The request's canonical JSON: keys sorted, every field present; the same bytes
    as `msgspec.json.encode(request, order="sorted")`."""
    if not request.tools or type(request) is not ModelRequest:
        return _sorted.encode(request)
    return b"".join((_request_head(request), tools_json(request.tools), b"}"))


REQUEST_HASH_V2 = "v2:"


def request_hash(request: ModelRequest) -> str:
    """`v2:` and the sha256 (hex) of the request's canonical JSON with its tools
    replaced by the JSON string of their own sha256 (hex): keys sorted, every field
    present, no whitespace. The tools, the same every turn and most of a request's
    bytes, are hashed once per list of tools, not once per turn (decision 0064).
    A hash recorded before this scheme is `request_hash_v1`'s; `same_request`
    compares a recorded hash of either scheme."""
    h = hashlib.sha256(_request_head(request))
    h.update(_tools_entry(request.tools)[2])
    h.update(b"}")
    return REQUEST_HASH_V2 + h.hexdigest()


def request_hash_v1(request: ModelRequest) -> str:
    """The first scheme: sha256 (hex) of the request's whole canonical JSON, tools
    included. What every `request_hash` recorded before decision 0064 holds."""
    if not request.tools or type(request) is not ModelRequest:
        return hashlib.sha256(_sorted.encode(request)).hexdigest()
    h = hashlib.sha256(_request_head(request))
    h.update(tools_json(request.tools))
    h.update(b"}")
    return h.hexdigest()


def same_request(recorded: str, digest: str, request: ModelRequest) -> bool:
    """Whether a recorded `request_hash` is the hash of `request`, whose current
    hash is `digest`. A hash of the first scheme (no `v2:`) is compared with
    `request_hash_v1`, so logs recorded before decision 0064 replay as they ran."""
    global _last_v1
    if recorded == digest:
        return True
    if recorded.startswith(REQUEST_HASH_V2):
        return False
    if _last_v1[0] is not request:  # replay compares one request with several records
        _last_v1 = (request, request_hash_v1(request))
    return recorded == _last_v1[1]


_last_v1: tuple[ModelRequest | None, str] = (None, "")


class ProviderError(GormesError):
    """The provider could not answer. `retryable` says whether trying again may help
    (rate limits, server errors, dropped connections) or not (a rejected request).

    `status` is the HTTP status, if there was one; `retry_after` the seconds the
    server asked us to wait before trying again (its `retry-after` or
    `retry-after-ms` header), if it said. `usage` is what the server reported
    using for a reply it produced and gormes could not use (see `billed`), which
    the API bills all the same; None when it reported nothing."""

    exit_code = 1

    def __init__(
        self, message: str, *, retryable: bool, status: int | None = None, retry_after: float | None = None,
        usage: Usage | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        self.usage = usage


class InvalidModelReply(ProviderError):
    """The provider answered, but not with a valid reply: tool call arguments that are
    not JSON, no choices, a stream that breaks off or does not parse."""

    def __init__(self, message: str, *, retryable: bool = False, usage: Usage | None = None) -> None:
        super().__init__(message, retryable=retryable, usage=usage)


def bill(exc: ProviderError, usage: Usage | None) -> ProviderError:
    """`exc`, carrying `usage` (what the server had reported for the reply it was
    reading) unless it carries some already or `usage` is none or zero: the tokens
    the API bills for a reply gormes could not use (decision 0069)."""
    if exc.usage is None and usage is not None and (usage.input or usage.output):
        exc.usage = usage
    return exc


@contextmanager
def billed(usage: Usage | None) -> Iterator[None]:
    """Around the reading of a reply whose usage the server reported: a
    `ProviderError` raised inside (a tool call cut off at max_tokens, a stream
    that broke off) carries that usage, so the run, its job and its budgets count
    the tokens the API bills for it (decision 0069, see `bill`)."""
    try:
        yield
    except ProviderError as exc:
        bill(exc, usage)
        raise


# Who hears what a stream had reported when its turn was cancelled (`on_cancel`).
_cancelled_usage: ContextVar[Callable[[Usage], None] | None] = ContextVar("cancelled_usage", default=None)


class on_cancel:  # noqa: N801 - used as a context manager, like contextlib's
    """Around a `complete`: if the turn is cancelled while its stream is read (or the
    reading ends in any exception but a `ProviderError`, which carries its usage
    itself), `hear` is given the usage the stream had reported by then (none
    reported: not called).
    The API bills a reply it began whether or not it is read to its end; a run's
    budgets settle to it rather than release their hold (decision 0069's second
    addendum), and the run records it (`run.llm_cut`, decision 0080). A class, not
    a generator: every model turn enters one, and it costs a third of one."""

    __slots__ = ("_hear", "_token")

    def __init__(self, hear: Callable[[Usage], None]) -> None:
        self._hear = hear

    def __enter__(self) -> None:
        self._token = _cancelled_usage.set(self._hear)

    def __exit__(self, *exc_info: object) -> None:
        _cancelled_usage.reset(self._token)


@contextmanager
def billed_as_read(reported: Callable[[], Usage | None] | None) -> Iterator[None]:
    """Around the reading of a stream: a `ProviderError` raised inside (an error
    event, an event that does not parse, a connection that broke) carries what
    `reported()` says the stream had reported by then, which the API bills; a
    cancel (or anything else that ends the reading) tells it to `on_cancel`'s
    listener. None: no stream is read, and the error is left as it is."""
    try:
        yield
    except ProviderError as exc:
        if reported is not None:
            bill(exc, reported())
        raise
    except BaseException:  # a cancel, above all (trio stays out of this module: quick reads import it)
        hear = _cancelled_usage.get()
        usage = None if hear is None or reported is None else reported()
        if hear is not None and usage is not None and (usage.input or usage.output):
            hear(usage)
        raise


def parse_tool_arguments(call: ToolCall, *, source: str = "model") -> dict[str, Any]:
    """A tool call's arguments as a JSON object, or `InvalidModelReply` saying why not."""
    try:
        value = msgspec.json.decode(call.arguments)
    except msgspec.DecodeError:
        raise InvalidModelReply(
            f"{source}: arguments of tool call {call.name!r} are not JSON: {call.arguments[:80]!r}"
        ) from None
    if not isinstance(value, dict):
        raise InvalidModelReply(
            f"{source}: arguments of tool call {call.name!r} are not a JSON object: {call.arguments[:80]!r}"
        )
    return value


@runtime_checkable
class Provider(Protocol):
    """A model behind the neutral interface.

    `name` is the spec it was opened with (`"openai:gpt-4o-mini"`); `model` is the
    model name to put in `ModelRequest.model`. A provider that sends an output
    bound of its own for a request with no `max_tokens` (Anthropic, whose API
    requires one) says which as `default_max_tokens`; a budget's output ceiling
    replaces it only when lower (gormes/control/output_ceiling.py).
    """

    name: str
    model: str

    async def complete(self, request: ModelRequest) -> ModelReply: ...
