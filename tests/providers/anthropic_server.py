"""A local HTTP server that speaks the Anthropic Messages API (`POST /v1/messages`).

Like `openai_server`: a real server on 127.0.0.1 in a thread; a test queues what
the next requests get and reads back what the server received. Streams are sent
in Anthropic's event order (message_start; content_block_start, deltas and
content_block_stop per block; message_delta with the stop reason and usage;
message_stop), each as `event: NAME` and `data: JSON`.

Every request is checked as the real API checks it (`request_problems`): the
version and key headers, `max_tokens`, roles (no `system` inside `messages`),
user first and alternating turns, non-empty content, tool names, and tool_result
blocks that answer the tool_use blocks of the assistant message just before and
come first in their user message. A refused request gets Anthropic's 400
(`invalid_request_error`), is kept in `rejections` and takes no queued reply.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

MODEL = "claude-test-2025-01-01"


@dataclass(frozen=True)
class Reply:
    """An assistant message: text, then tool_use blocks (id, wire name, input JSON text)."""

    text: str = ""
    tools: list[tuple[str, str, str]] = field(default_factory=list)
    stop_reason: str | None = None  # default: tool_use if there are tools, else end_turn
    input_tokens: int = 12
    output_tokens: int = 6
    cache_creation: int = 0
    cache_read: int = 0
    fragment: int = 4  # characters per text or partial_json delta
    model: str = MODEL


@dataclass(frozen=True)
class Error:
    status: int
    type: str
    message: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RawEvents:
    """Streams these (event name, data text) pairs verbatim."""

    events: list[tuple[str, str]]


@dataclass(frozen=True)
class ErrorMidStream:
    """The reply's first `after` stream events, then an `error` event, and the end of
    the stream: what the API sends when it fails after it has begun to answer (its
    streaming docs: an `overloaded_error`, during high load, where a request that
    is not streamed gets HTTP 529). The HTTP status stays 200."""

    reply: Reply
    after: int = 2  # message_start and ping
    type: str = "overloaded_error"
    message: str = "Overloaded"


@dataclass(frozen=True)
class Garbled:
    """The reply's stream with event `at` replaced by text that is not JSON; every
    other event, the usage of message_start and message_delta with them, as sent."""

    reply: Reply
    at: int = 2


@dataclass(frozen=True)
class Dropped:
    """The reply's first `after` stream events, then the connection closes inside its
    chunked body (no final chunk): a connection that broke mid-reply."""

    reply: Reply
    after: int = 2


@dataclass(frozen=True)
class Stall:
    """Answers nothing until the server stops."""


@dataclass(frozen=True)
class StallMidStream:
    """The reply's first `after` stream events, then nothing until the server stops:
    a reply the API has begun (message_start has reported its usage) that the
    client gives up on."""

    reply: Reply
    after: int = 2  # message_start and ping


Plan = Reply | Error | RawEvents | ErrorMidStream | Garbled | Dropped | Stall | StallMidStream


@dataclass(frozen=True)
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class MessagesServer:
    require_key: str | None = None  # the x-api-key every request must carry, if any
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
        return f"http://{host}:{port}"

    def __enter__(self) -> Self:
        server = self

        class Handler(_MessagesHandler):
            messages_server = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


class _MessagesHandler(BaseHTTPRequestHandler):
    messages_server: MessagesServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        server = self.messages_server
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in self.headers.items()}
        received = ReceivedRequest(self.path, headers, body)
        if self.path != "/v1/messages":
            with server._lock:
                server.requests.append(received)
            return self._error(404, "not_found_error", f"no route {self.path}")
        problems = header_problems(headers, server.require_key) + request_problems(body)
        with server._lock:
            server.requests.append(received)
            if problems:
                server.rejections.append(problems[0])
                plan: Plan = Error(400, "invalid_request_error", problems[0])
            elif server._plans:
                plan = server._plans.popleft()
            else:
                plan = Error(500, "api_error", "the test queued no reply for this request")
        if isinstance(plan, Stall):
            server._release.wait()
            self.close_connection = True
            return None
        if isinstance(plan, Error):
            return self._error(plan.status, plan.type, plan.message, plan.headers)
        if isinstance(plan, RawEvents):
            return self._send_events(plan.events)
        if isinstance(plan, ErrorMidStream):
            error = {"type": "error", "error": {"type": plan.type, "message": plan.message}}
            return self._send_events(stream_events(plan.reply)[: plan.after] + [("error", json.dumps(error))])
        if isinstance(plan, Garbled):
            events = stream_events(plan.reply)
            events[plan.at] = (events[plan.at][0], "{not json")
            return self._send_events(events)
        if isinstance(plan, Dropped):
            return self._send_events(stream_events(plan.reply)[: plan.after], finish=False)
        if isinstance(plan, StallMidStream):
            self._send_events(stream_events(plan.reply)[: plan.after], finish=False)
            server._release.wait()
            return None
        if body.get("stream") is True:
            return self._send_events(stream_events(plan))
        return self._send(200, json.dumps(whole_message(plan)), "application/json")

    def _error(self, status: int, kind: str, message: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        payload = {"type": "error", "error": {"type": kind, "message": message}}
        self._send(status, json.dumps(payload), "application/json", headers)

    def _send(self, status: int, text: str, content_type: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _send_events(self, events: list[tuple[str, str]], *, finish: bool = True) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for name, data in events:
                chunk = f"event: {name}\ndata: {data}\n\n".encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            if finish:
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass


# -- replies -----------------------------------------------------------------------


def _stop_reason(plan: Reply) -> str:
    return plan.stop_reason or ("tool_use" if plan.tools else "end_turn")


def _usage(plan: Reply, output: int) -> dict[str, int]:
    return {
        "input_tokens": plan.input_tokens,
        "cache_creation_input_tokens": plan.cache_creation,
        "cache_read_input_tokens": plan.cache_read,
        "output_tokens": output,
    }


def whole_message(plan: Reply) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": plan.text}] if plan.text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": json.loads(a)} for i, n, a in plan.tools]
    return {
        "id": "msg_test", "type": "message", "role": "assistant", "model": plan.model, "content": content,
        "stop_reason": _stop_reason(plan), "stop_sequence": None, "usage": _usage(plan, plan.output_tokens),
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_events(plan: Reply) -> list[tuple[str, str]]:
    start = {
        "id": "msg_test", "type": "message", "role": "assistant", "model": plan.model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": _usage(plan, 1),
    }
    events: list[tuple[str, Any]] = [("message_start", {"type": "message_start", "message": start}), ("ping", {"type": "ping"})]
    index = 0
    if plan.text:
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}))
        for piece in _pieces(plan.text, plan.fragment):
            delta = {"type": "text_delta", "text": piece}
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for id_, name, arguments in plan.tools:
        block = {"type": "tool_use", "id": id_, "name": name, "input": {}}
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": block}))
        for piece in _pieces(arguments, plan.fragment):
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    delta = {"type": "message_delta", "delta": {"stop_reason": _stop_reason(plan), "stop_sequence": None},
             "usage": {"output_tokens": plan.output_tokens}}
    events += [("message_delta", delta), ("message_stop", {"type": "message_stop"})]
    return [(name, json.dumps(data)) for name, data in events]


# -- what the real API refuses -------------------------------------------------------

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def header_problems(headers: dict[str, str], key: str | None) -> list[str]:
    problems = []
    if "anthropic-version" not in headers:
        problems.append("anthropic-version: header is required")
    # The SDK sends the key as a bearer token; the API takes that or `x-api-key`.
    if key is not None and key not in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer ")):
        problems.append("authentication_error: invalid x-api-key")
    return problems


def request_problems(body: Any) -> list[str]:
    """What the Messages API would say is wrong with this body (empty: nothing)."""
    if not isinstance(body, dict):
        return ["There was an error parsing the body of your request."]
    problems: list[str] = []
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model: Field required")
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        problems.append("max_tokens: Field required")
    temperature = body.get("temperature")
    if temperature is not None and not (isinstance(temperature, int | float) and 0 <= temperature <= 1):
        problems.append("temperature: Input should be less than or equal to 1")
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        problems.append("system: Input should be a valid string or list")
    for i, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not TOOL_NAME.match(tool["name"]):
            name = tool.get("name") if isinstance(tool, dict) else None
            problems.append(f"tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$' (got {name!r})")
        elif not isinstance(tool.get("input_schema"), dict) or tool["input_schema"].get("type") != "object":
            problems.append(f"tools.{i}.custom.input_schema: Input should be an object schema")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return problems + ["messages: at least one message is required"]
    pending: set[str] = set()  # tool_use ids of the assistant message just before
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "system":
            problems.append(
                'messages: Unexpected role "system". The Messages API accepts a top-level `system` parameter, '
                "not \"system\" as an input message role."
            )
            continue
        if role not in ("user", "assistant"):
            problems.append(f"messages.{i}.role: Input should be 'user' or 'assistant'")
            continue
        if i == 0 and role != "user":
            problems.append("messages: first message must use the \"user\" role")
        if i > 0 and isinstance(messages[i - 1], dict) and messages[i - 1].get("role") == role:
            problems.append(f"messages: roles must alternate between \"user\" and \"assistant\" (messages.{i})")
        content = message.get("content")
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            blocks = content
        else:
            problems.append(f"messages.{i}.content: Field required")
            continue
        if not blocks:
            problems.append(f"messages.{i}: all messages must have non-empty content")
        answered: set[str] = set()
        seen_other = False
        uses: set[str] = set()
        for j, block in enumerate(blocks):
            where = f"messages.{i}.content.{j}"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                if not isinstance(block.get("text"), str) or not block["text"]:
                    problems.append(f"{where}: text content blocks must be non-empty")
                seen_other = True
            elif kind == "tool_use":
                if role != "assistant":
                    problems.append(f"{where}: tool_use blocks may only appear in assistant messages")
                if not isinstance(block.get("id"), str) or not isinstance(block.get("input"), dict):
                    problems.append(f"{where}.tool_use: id and input are required")
                elif not TOOL_ID.match(block["id"]):
                    problems.append(f"{where}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
                if not isinstance(block.get("name"), str) or not TOOL_NAME.match(block["name"]):
                    problems.append(f"{where}.tool_use.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
                uses.add(str(block.get("id")))
                seen_other = True
            elif kind == "tool_result":
                use_id = block.get("tool_use_id")
                if role != "user":
                    problems.append(f"{where}: tool_result blocks may only appear in user messages")
                elif use_id not in pending:
                    problems.append(
                        f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: {use_id}. Each `tool_result` "
                        "block must have a corresponding `tool_use` block in the previous message."
                    )
                elif seen_other:
                    problems.append(f"{where}: tool_result blocks must come first in the user message's content")
                answered.add(str(use_id))
                result = block.get("content")
                if result is not None and not isinstance(result, str | list):
                    problems.append(f"{where}.content: Input should be a valid string or list")
            else:
                problems.append(f"{where}.type: Input tag {kind!r} does not match any of the expected tags")
        if pending - answered:
            problems.append(
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                + ", ".join(sorted(pending - answered))
            )
        pending = uses if role == "assistant" else set()
    return problems
