"""A local HTTP server that speaks the OpenAI chat-completions wire protocol.

It stands in for a paid API in tests: a real server on 127.0.0.1 (ephemeral port,
in a thread) that answers `POST /v1/chat/completions` the way OpenAI does, as
server-sent events when the request says `"stream": true` and as one JSON object
otherwise. A test queues what the next requests get and then reads back what the
server received.

Every request is checked the way the real API checks it (`request_problems`):
tool and function names, roles, required fields, tool messages that answer no
tool call of the assistant message before them. A request the real API would
refuse gets its 400 (`invalid_request_error`), is kept in `rejections`, and takes
no queued reply, so the test that sent it fails.

    with ChatServer() as server:
        server.queue(ToolCallsReply([("call_1", "fs.read", '{"path": "README.md"}')]))
        provider = OpenAIProvider("gpt-test", base_url=server.base_url, api_key="sk-test")
        ...
        server.requests[0].body["stream"]
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass(frozen=True)
class TextReply:
    text: str
    prompt_tokens: int = 11
    completion_tokens: int = 7
    cached_tokens: int = 0
    reasoning_tokens: int = 0  # reported in completion_tokens_details when set
    fragment: int = 4  # characters per streamed content delta
    send_usage: bool = True
    model: str = "gpt-test-2025-01-01"
    pause: float = 0.0  # seconds between streamed chunks


@dataclass(frozen=True)
class ToolCallsReply:
    calls: list[tuple[str, str, str]]  # (id, name, arguments JSON text)
    text: str = ""
    prompt_tokens: int = 20
    completion_tokens: int = 9
    cached_tokens: int = 0
    fragment: int = 5  # characters per streamed arguments delta
    model: str = "gpt-test-2025-01-01"
    finish_reason: str = "tool_calls"


def held_to_max_tokens(plan: ToolCallsReply, body: Any) -> ToolCallsReply:
    """The reply as the API gives it when the request's `max_completion_tokens` (or
    `max_tokens`) is less than the reply's output: it stops there, mid-arguments
    if it must, with finish_reason "length", and bills the tokens it wrote (the
    arguments cut at four characters a token, the stand-in's tokenizer)."""
    limit = body.get("max_completion_tokens", body.get("max_tokens")) if isinstance(body, dict) else None
    if limit is None or plan.completion_tokens <= limit:
        return plan
    room, calls = limit * 4, []
    for id_, name, args in plan.calls:
        if room <= 0:
            break
        calls.append((id_, name, args[:room]))
        room -= len(args)
    return replace(plan, calls=calls, completion_tokens=limit, finish_reason="length")


@dataclass(frozen=True)
class ErrorReply:
    status: int
    message: str
    body: str | None = None  # sent as is instead of OpenAI's error object
    headers: tuple[tuple[str, str], ...] = ()  # ("retry-after", "2"), say


@dataclass(frozen=True)
class RawStream:
    """Streams these SSE lines verbatim (for malformed and broken streams)."""

    lines: list[str]


@dataclass(frozen=True)
class Garbled:
    """The reply's stream, as the request's `stream_options` asks, with chunk `at`
    replaced by text that is not JSON; every other chunk (the usage chunk, last,
    with them) as sent."""

    reply: TextReply | ToolCallsReply
    at: int = 1


@dataclass(frozen=True)
class RawBody:
    """A 200 reply with this JSON text as body (for malformed whole replies)."""

    body: str


@dataclass(frozen=True)
class Stall:
    """Answers nothing until the server stops (for timeouts, with no race)."""


Plan = TextReply | ToolCallsReply | ErrorReply | RawStream | Garbled | RawBody | Stall


@dataclass(frozen=True)
class ReceivedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class ChatServer:
    requests: list[ReceivedRequest] = field(default_factory=list)
    rejections: list[str] = field(default_factory=list)
    _plans: deque[Plan] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _release: threading.Event = field(default_factory=threading.Event)

    def queue(self, *plans: Plan) -> None:
        with self._lock:
            self._plans.extend(plans)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> Self:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def _next_plan(self, received: ReceivedRequest) -> Plan:
        with self._lock:
            self.requests.append(received)
            if not self._plans:
                return ErrorReply(500, "the test queued no reply for this request")
            return self._plans.popleft()


def _handler_for(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_ChatHandler):
        chat_server = server

    return Handler


class _ChatHandler(BaseHTTPRequestHandler):
    chat_server: ChatServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        received = ReceivedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        problems = request_problems(body) if self.path == "/v1/chat/completions" else []
        if problems:
            with self.chat_server._lock:
                self.chat_server.requests.append(received)
                self.chat_server.rejections.append(problems[0])
            return self._send_json(400, {"error": {"message": problems[0], "type": "invalid_request_error", "param": None, "code": None}})
        plan = self.chat_server._next_plan(received)
        if self.path != "/v1/chat/completions":
            return self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
        stream = isinstance(body, dict) and body.get("stream") is True
        if isinstance(plan, Stall):
            self.chat_server._release.wait()
            self.close_connection = True
            return None
        if isinstance(plan, ErrorReply):
            if plan.body is not None:
                return self._send_text(plan.status, plan.body, "text/plain", plan.headers)
            payload = {"error": {"message": plan.message, "type": "test_error", "code": None}}
            return self._send_text(plan.status, json.dumps(payload), "application/json", plan.headers)
        if isinstance(plan, RawBody):
            return self._send_text(200, plan.body, "application/json")
        if isinstance(plan, RawStream):
            return self._send_events(plan.lines)
        if isinstance(plan, Garbled):
            reply = held_to_max_tokens(plan.reply, body) if isinstance(plan.reply, ToolCallsReply) else plan.reply
            lines = _stream_lines(reply, bool(body.get("stream_options", {}).get("include_usage")))
            lines[plan.at] = "data: {not json"
            return self._send_events(lines)
        if isinstance(plan, ToolCallsReply):
            plan = held_to_max_tokens(plan, body)
        if stream:
            include_usage = bool(body.get("stream_options", {}).get("include_usage"))
            pause = plan.pause if isinstance(plan, TextReply) else 0.0
            return self._send_events(_stream_lines(plan, include_usage), pause)
        return self._send_json(200, _whole_reply(plan))

    def _send_json(self, status: int, payload: Any) -> None:
        self._send_text(status, json.dumps(payload), "application/json")

    def _send_text(self, status: int, text: str, content_type: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _send_events(self, lines: list[str], pause: float = 0.0) -> None:
        # Chunked transfer encoding, as real servers stream: one HTTP chunk per event.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for line in lines:
                data = (line + "\n\n").encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
                time.sleep(pause)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away mid-stream (a cancelled call)


def _usage(plan: TextReply | ToolCallsReply) -> dict[str, Any]:
    return {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": plan.completion_tokens,
        "total_tokens": plan.prompt_tokens + plan.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": plan.cached_tokens},
        **({"completion_tokens_details": {"reasoning_tokens": plan.reasoning_tokens}}
           if getattr(plan, "reasoning_tokens", 0) else {}),
    }


def _whole_reply(plan: TextReply | ToolCallsReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": plan.text or None}
    finish = "stop"
    if isinstance(plan, ToolCallsReply):
        finish = plan.finish_reason
        message["tool_calls"] = [
            {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}
            for id_, name, args in plan.calls
        ]
    reply = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1700000000,
        "model": plan.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
    }
    if not (isinstance(plan, TextReply) and not plan.send_usage):
        reply["usage"] = _usage(plan)
    return reply


def _chunk(plan: TextReply | ToolCallsReply, delta: dict[str, Any], finish: str | None = None,
           include_usage: bool = False) -> str:
    payload: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": plan.model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }
    if include_usage:  # every chunk but the usage chunk has `"usage": null` (stream_options.include_usage)
        payload["usage"] = None
    return "data: " + json.dumps(payload)


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _stream_lines(plan: TextReply | ToolCallsReply, include_usage: bool) -> list[str]:
    lines = [_chunk(plan, {"role": "assistant", "content": ""}, None, include_usage)]
    lines += [_chunk(plan, {"content": piece}, None, include_usage) for piece in _pieces(plan.text, plan.fragment)]
    finish = "stop"
    if isinstance(plan, ToolCallsReply):
        finish = plan.finish_reason
        for index, (id_, name, args) in enumerate(plan.calls):
            head = {"index": index, "id": id_, "type": "function", "function": {"name": name, "arguments": ""}}
            lines.append(_chunk(plan, {"tool_calls": [head]}, None, include_usage))
            for piece in _pieces(args, plan.fragment):
                lines.append(_chunk(plan, {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}, None, include_usage))
    lines.append(_chunk(plan, {}, finish, include_usage))
    if include_usage and not (isinstance(plan, TextReply) and not plan.send_usage):
        usage_chunk = {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": plan.model,
            "choices": [],
            "usage": _usage(plan),
        }
        lines.append("data: " + json.dumps(usage_chunk))
    lines.append("data: [DONE]")
    return lines


# -- what the real API refuses -------------------------------------------------------

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
PARTICIPANT_NAME = re.compile(r"^[^\s<|\\/>]+$")
ROLES = ("system", "developer", "user", "assistant", "tool")
# OpenAI's reasoning models (o-series, gpt-5): they refuse the deprecated `max_tokens`
REASONING_MODEL = re.compile(r"^(o\d|gpt-5)")


def request_problems(body: Any) -> list[str]:
    """What OpenAI would say is wrong with this chat-completions body (empty: nothing)."""
    if not isinstance(body, dict):
        return ["We could not parse the JSON body of your request."]
    problems: list[str] = []
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("you must provide a model parameter")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("Invalid 'messages': empty array. Expected an array with minimum length 1.")
        messages = []
    if "stream_options" in body and body.get("stream") is not True:
        problems.append("The 'stream_options' parameter is only allowed when 'stream' is enabled.")
    for key, low, high in (("temperature", 0, 2), ("max_tokens", 1, None), ("max_completion_tokens", 1, None)):
        value = body.get(key)
        if value is not None and (not isinstance(value, int | float) or value < low or (high is not None and value > high)):
            problems.append(f"Invalid '{key}': {value!r}.")
    if "max_tokens" in body and isinstance(body.get("model"), str) and REASONING_MODEL.match(body["model"]):
        problems.append("Unsupported parameter: 'max_tokens' is not supported with this model. "
                        "Use 'max_completion_tokens' instead.")
    for i, tool in enumerate(body.get("tools") or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            problems.append(f"Invalid 'tools[{i}]': expected a function tool.")
            continue
        problems += _name_problems(f"tools[{i}].function.name", function.get("name"))
        if "parameters" in function and not isinstance(function["parameters"], dict):
            problems.append(f"Invalid 'tools[{i}].function.parameters': expected an object.")
    if "tools" in body and not body["tools"]:
        problems.append("Invalid 'tools': empty array. Expected an array with minimum length 1.")
    open_calls: set[str] | None = None  # ids the tool messages after an assistant turn may answer
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            role = message.get("role") if isinstance(message, dict) else None
            problems.append(f"Invalid value: {role!r}. Supported values are: {', '.join(repr(r) for r in ROLES)}. ({where}.role)")
            continue
        role, content = message["role"], message.get("content")
        if "name" in message and (not isinstance(message["name"], str) or not PARTICIPANT_NAME.match(message["name"])):
            problems.append(f"Invalid '{where}.name': string does not match pattern.")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                problems.append(f"Missing required parameter: '{where}.tool_call_id'.")
            elif open_calls is None or call_id not in open_calls:
                problems.append(
                    f"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'. ({where})"
                )
            else:
                open_calls.discard(call_id)
            if not isinstance(content, str | list):
                problems.append(f"Missing required parameter: '{where}.content'.")
            continue
        if open_calls:
            problems.append(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(sorted(open_calls))}"
            )
        open_calls = None
        if role == "assistant":
            calls = message.get("tool_calls")
            if calls is not None:
                if not isinstance(calls, list) or not calls:
                    problems.append(f"Invalid '{where}.tool_calls': empty array.")
                    calls = []
                open_calls = set()
                for j, call in enumerate(calls):
                    function = call.get("function") if isinstance(call, dict) else None
                    if not isinstance(function, dict) or not isinstance(call.get("id"), str) or call.get("type") != "function":
                        problems.append(f"Invalid '{where}.tool_calls[{j}]'.")
                        continue
                    problems += _name_problems(f"{where}.tool_calls[{j}].function.name", function.get("name"))
                    if not isinstance(function.get("arguments"), str):
                        problems.append(f"Missing required parameter: '{where}.tool_calls[{j}].function.arguments'.")
                    open_calls.add(call["id"])
            elif not isinstance(content, str | list):
                problems.append(f"Missing required parameter: '{where}.content'.")
        elif not isinstance(content, str | list):
            problems.append(f"Missing required parameter: '{where}.content'.")
    if open_calls:
        problems.append(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(sorted(open_calls))}"
        )
    return problems


def _name_problems(where: str, name: Any) -> list[str]:
    if isinstance(name, str) and TOOL_NAME.match(name):
        return []
    return [f"Invalid '{where}': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{{1,64}}$'."]
