"""`scripted:PATH`: model replies read from a JSON script. Not a model.

It is for the demo and tests: deterministic and offline. See docs/providers.md
for the script format. Three rules make it deterministic however many runs
share one script concurrently:

- The agent is chosen from the conversation's opening (first system message and
  first user message), which never changes during a run: the first agent entry
  whose `match` text occurs there (an entry without `match` matches anything).
- The reply is chosen by the turn: the number of assistant messages already in
  the request. No shared cursor, so concurrent runs cannot steal each other's
  replies, and a forked run continuing at turn N gets reply N.
- An `error` entry fails the turn that follows it once; the retried request then
  gets the next entry. Attempts are counted per trio task (a run retries in the
  task that made the call) and per request, so every run meets its script's
  errors, whether or not runs share one provider, and no two runs share one.

Like a real API it honours the request's `max_tokens`: a reply whose output
(its `usage`, else its estimate) is more stops there (`held_to_max_tokens`).
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import msgspec
import trio

from gormes.providers import timer
from gormes.providers.base import (
    InvalidModelReply,
    Message,
    ModelReply,
    ModelRequest,
    ProviderError,
    ToolCall,
    Usage,
    billed,
    parse_tool_arguments,
    request_hash,
    tools_json,
)
from gormes.errors import UserError


class ScriptError(UserError):
    """A script file that cannot be read or does not follow the script format."""


class ScriptedToolCall(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    # An object is encoded as JSON; a string is passed through as the model's raw
    # text, so a script can also play a model that emits arguments that are not JSON.
    arguments: dict[str, Any] | str = {}
    id: str | None = None


class ScriptStep(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One entry of an agent's replies: a reply (text and/or tool calls) or an error."""

    text: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    error: str | None = None
    retryable: bool = True
    usage: Usage | None = None
    finish_reason: str | None = None
    # how long the "model" takes to answer (a slow turn, for demos and crash tests)
    delay_ms: int = 0

    @property
    def is_error(self) -> bool:
        return self.error is not None


class AgentScript(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    replies: tuple[ScriptStep, ...]
    name: str | None = None
    match: str | None = None


class Script(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    agents: tuple[AgentScript, ...]
    model: str = "scripted"


class Turn(msgspec.Struct, frozen=True):
    """The errors raised on a turn's first attempts, then its reply (None: fail for good)."""

    errors: tuple[ScriptStep, ...]
    reply: ScriptStep | None


class ScriptedAgent(msgspec.Struct, frozen=True):
    name: str
    match: str | None
    turns: tuple[Turn, ...]


def load_script(path: str | Path) -> Script:
    """Read and check a script file; any problem is one `ScriptError` line naming the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ScriptError(f"model script {path}: no such file") from None
    except IsADirectoryError:
        raise ScriptError(f"model script {path}: is a directory, not a file") from None
    except OSError as exc:
        raise ScriptError(f"model script {path}: cannot read: {exc.strerror}") from None
    try:
        decoded = msgspec.json.decode(data, type=Script | list[ScriptStep])
    except msgspec.ValidationError as exc:
        raise ScriptError(f"model script {path}: {_one_line(exc)}") from None
    except msgspec.DecodeError as exc:
        raise ScriptError(f"model script {path}: not valid JSON: {_one_line(exc)}") from None
    script = decoded if isinstance(decoded, Script) else Script(agents=(AgentScript(replies=tuple(decoded)),))
    problem = _find_problem(script)
    if problem:
        raise ScriptError(f"model script {path}: {problem}")
    return script


def _find_problem(script: Script) -> str | None:
    if not script.agents:
        return "`agents` is empty"
    for a, agent in enumerate(script.agents):
        where = f"agents[{a}]"
        if not agent.replies:
            return f"{where}.replies is empty"
        for r, step in enumerate(agent.replies):
            at = f"{where}.replies[{r}]"
            if step.is_error and (step.text is not None or step.tool_calls):
                return f"{at}: an entry is either an `error` or a reply (`text`, `tool_calls`), not both"
            if not step.is_error and step.text is None and not step.tool_calls:
                return f"{at}: a reply needs `text` or `tool_calls` (or the entry is an `error`)"
            if step.delay_ms < 0:
                return f"{at}: `delay_ms` must be 0 or more, not {step.delay_ms}"
    return None


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def compile_agents(script: Script) -> tuple[ScriptedAgent, ...]:
    agents = []
    for a, agent in enumerate(script.agents):
        turns: list[Turn] = []
        errors: list[ScriptStep] = []
        for step in agent.replies:
            if step.is_error:
                errors.append(step)
            else:
                turns.append(Turn(tuple(errors), step))
                errors = []
        if errors:
            turns.append(Turn(tuple(errors), None))
        agents.append(ScriptedAgent(agent.name or f"agents[{a}]", agent.match, tuple(turns)))
    return tuple(agents)


def conversation_opening(messages: tuple[Message, ...]) -> str:
    """The first system message and the first user message: what a run starts with."""
    system = next((m.content for m in messages if m.role == "system"), "")
    user = next((m.content for m in messages if m.role == "user"), "")
    return f"{system}\n{user}"


def estimate_tokens(chars: int) -> int:
    """A documented stand-in for a tokenizer: one token per four characters, rounded up."""
    return (chars + 3) // 4


def _message_chars(message: Message) -> int:
    return len(message.content) + sum(len(c.name) + len(c.arguments) for c in message.tool_calls)


def estimate_usage(request: ModelRequest, reply: Message) -> Usage:
    messages = request.messages
    prompt = sum([len(m.content) for m in messages]) + sum([
        len(c.name) + len(c.arguments) for m in messages if m.tool_calls for c in m.tool_calls
    ])
    prompt += len(tools_json(request.tools)) if request.tools else 0
    return Usage(input=estimate_tokens(prompt), output=estimate_tokens(_message_chars(reply)))


class ScriptedProvider:
    """Serves a script's replies; one provider may serve any number of concurrent runs."""

    def __init__(self, script: Script, *, name: str) -> None:
        self.name = name
        self.model = script.model
        self._agents = compile_agents(script)
        self._attempts: weakref.WeakKeyDictionary[trio.lowlevel.Task, dict[tuple[str, int, str], int]] = (
            weakref.WeakKeyDictionary()
        )
        # a step's tool calls, made (and checked) once: by (id of the step, turn index);
        # the steps live as long as the provider (`_agents`), so their ids stay theirs
        self._calls: dict[tuple[int, int], tuple[ToolCall, ...]] = {}

    @classmethod
    def open(cls, path: str | Path, **config: Any) -> ScriptedProvider:
        unknown = sorted(k for k, v in config.items() if v is not None)
        if unknown:
            raise UserError(f"the scripted provider takes no options (given: {', '.join(unknown)})")
        return cls(load_script(path), name=f"scripted:{path}")

    async def complete(self, request: ModelRequest) -> ModelReply:
        # A checkpoint like any real provider call, so cancellation reaches here; the
        # choice below then runs without yielding, so it is atomic among tasks.
        await trio.lowlevel.checkpoint()
        agent = self._agent_for(request)
        turn_index = sum(1 for m in request.messages if m.role == "assistant")
        if turn_index >= len(agent.turns):
            raise ProviderError(
                f"{self.name}: agent {agent.name!r} has {len(agent.turns)} replies; "
                f"the conversation asks for reply {turn_index + 1}",
                retryable=False,
            )
        turn = agent.turns[turn_index]
        if turn.errors:
            attempts = self._attempts.setdefault(trio.lowlevel.current_task(), {})
            key = (agent.name, turn_index, request_hash(request))
            attempt = attempts.get(key, 0)
            attempts[key] = attempt + 1
            if attempt < len(turn.errors) or turn.reply is None:
                failure = turn.errors[min(attempt, len(turn.errors) - 1)]
                raise ProviderError(f"{self.name}: {failure.error}", retryable=failure.retryable)
        assert turn.reply is not None
        if turn.reply.delay_ms:
            await timer.sleep(turn.reply.delay_ms / 1000)
        return held_to_max_tokens(self._reply(request, turn.reply, turn_index), request.max_tokens, self.name)

    def _agent_for(self, request: ModelRequest) -> ScriptedAgent:
        opening = conversation_opening(request.messages)
        for agent in self._agents:
            if agent.match is None or agent.match in opening:
                return agent
        raise ProviderError(
            f"{self.name}: no agent's `match` occurs in the conversation's opening "
            f"{opening[:80]!r}",
            retryable=False,
        )

    def _reply(self, request: ModelRequest, step: ScriptStep, turn_index: int) -> ModelReply:
        calls = self._calls.get((id(step), turn_index))
        if calls is None:
            calls = self._calls[(id(step), turn_index)] = self._tool_calls(step, turn_index)
        message = Message(role="assistant", content=step.text or "", tool_calls=calls)
        return ModelReply(
            message=message,
            usage=step.usage or estimate_usage(request, message),
            finish_reason=step.finish_reason or ("tool_calls" if calls else "stop"),
            model=self.model,
        )

    def _tool_calls(self, step: ScriptStep, turn_index: int) -> tuple[ToolCall, ...]:
        calls = tuple(
            ToolCall(
                id=call.id or f"call-{turn_index + 1}-{i + 1}",
                name=call.name,
                arguments=(
                    call.arguments
                    if isinstance(call.arguments, str)
                    else msgspec.json.encode(call.arguments, order="sorted").decode()
                ),
            )
            for i, call in enumerate(step.tool_calls)
        )
        for call in calls:
            parse_tool_arguments(call, source=self.name)
        return calls


def held_to_max_tokens(reply: ModelReply, max_tokens: int | None, source: str) -> ModelReply:
    """The reply as a model held to `max_tokens` gives it, the way a real API does:
    one whose output is more stops at `max_tokens` output tokens, its text and then
    its tool calls cut at four characters a token (`estimate_tokens`), its
    finish_reason "length". A tool call cut inside its arguments is not JSON: an
    `InvalidModelReply`, as the HTTP providers raise for one, carrying the usage
    the API bills for it."""
    if max_tokens is None or reply.usage.output <= max_tokens:
        return reply
    room = max_tokens * 4
    text = reply.message.content[:room]
    room -= len(text)
    calls: list[ToolCall] = []
    for call in reply.message.tool_calls:
        if room <= len(call.name):
            break
        arguments = call.arguments[:room - len(call.name)]
        room -= len(call.name) + len(arguments)
        calls.append(msgspec.structs.replace(call, arguments=arguments))
    usage = msgspec.structs.replace(reply.usage, output=max_tokens,
                                    reasoning=min(reply.usage.reasoning, max_tokens))
    with billed(usage):
        for call in calls:
            parse_tool_arguments(call, source=source)
    message = Message(role="assistant", content=text, tool_calls=tuple(calls))
    return ModelReply(message=message, usage=usage, finish_reason="length", model=reply.model)


__all__ = ["InvalidModelReply", "ScriptError", "ScriptedProvider", "load_script"]
