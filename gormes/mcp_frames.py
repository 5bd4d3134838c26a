"""An answer for every MCP frame the SDK's stdio transport cannot read (decision 0073).

The `mcp` SDK's stdio transport parses each line of stdin with pydantic; a line
that fails (not JSON, nested deeper than pydantic's parser goes, about 200
levels, or JSON that is no JSON-RPC message) becomes an exception on its read
stream, which the SDK's dispatcher logs at debug level and drops
(modelcontextprotocol/python-sdk#2751): a client waiting on that request's id
waited for ever. `AnsweringBadFrames` wraps that read stream: an exception never
reaches the SDK; it is judged here (`judge`, pure) and answered as JSON-RPC 2.0
says, with the SDK's own `JSONRPCError` sent down the SDK's own write stream, so
the transport's one writer task writes it as one line between its others.

- not JSON: -32700 Parse error, id null;
- nested deeper than `MAX_NESTING`: -32600, the id read from the frame's top
  level by a flat scan (`top_level`), since every decoder recurses;
- JSON but no JSON-RPC message (no `"jsonrpc": "2.0"`, a batch array): -32600,
  with its top-level id when it has a valid one;
- a notification (a `method`, no `id`) or a response (`result` or `error`, no
  `method`) gets no reply: nobody waits on the first, and an error carrying a
  response's id would answer one of the client's own requests.

Each is one warning line on stderr, which says what the frame was and its size,
never its content.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, RequestId
from pydantic import ValidationError

from gormes.events.json_nesting import MAX_NESTING, nesting_depth_over, top_level

NOT_JSON = "not JSON"
TOO_DEEP = f"nested deeper than {MAX_NESTING} levels"
NOT_AN_OBJECT = "not one JSON object (batches are not served)"
NOT_A_MESSAGE = "not a JSON-RPC 2.0 message"


@dataclass(frozen=True)
class BadFrame:
    """What an unreadable frame was, and the error it gets (`code` None: no reply)."""

    what: str
    code: int | None
    request_id: RequestId | None = None
    chars: int | None = None

    def reply(self) -> JSONRPCError | None:
        if self.code is None:
            return None
        message = "Parse error" if self.code == PARSE_ERROR else f"Invalid Request: {self.what}"
        return JSONRPCError(jsonrpc="2.0", id=self.request_id, error=ErrorData(code=self.code, message=message))

    def describe(self) -> str:
        size = f" ({self.chars} characters)" if self.chars is not None else ""
        if self.code is None:
            return f"mcp: dropped a frame{size}: {self.what}; no reply"
        return f"mcp: refused a frame{size}: {self.what}; answered {self.code}, id {json.dumps(self.request_id)}"


def judge(exc: Exception) -> BadFrame:
    """The frame behind `exc`, an item of the SDK's read stream, and its answer."""
    if not isinstance(exc, ValidationError):  # not what the SDK raises today
        return BadFrame(f"unreadable ({type(exc).__name__})", PARSE_ERROR)
    errors = exc.errors(include_url=False, include_context=False)
    if errors and errors[0]["type"] == "json_invalid":
        raw = errors[0]["input"]
        if not isinstance(raw, (str, bytes)):
            return BadFrame(NOT_JSON, PARSE_ERROR)
        text = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw
        if nesting_depth_over(text):
            return _invalid(top_level(text), TOO_DEEP, len(raw))
        return BadFrame(NOT_JSON, PARSE_ERROR, chars=len(raw))
    return _invalid(_top_value(errors), NOT_A_MESSAGE, None)


def _top_value(errors: Sequence[Any]) -> object:
    """The frame's decoded value, as the errors of the SDK's union of message
    models carry it: a member refusing the value's type (loc: the member), or
    missing a field of it (loc: the member, the field)."""
    for error in errors:
        loc = error["loc"]
        if len(loc) == 1 or (len(loc) == 2 and error["type"] == "missing"):
            return error["input"]
    return None


def _invalid(top: object, what: str, chars: int | None) -> BadFrame:
    if not isinstance(top, dict):
        shape_known = top is not None and what == NOT_A_MESSAGE
        return BadFrame(NOT_AN_OBJECT if shape_known else what, INVALID_REQUEST, chars=chars)
    if "method" in top and "id" not in top:
        return BadFrame(f"a notification, {what}", None, chars=chars)
    if "method" not in top and ("result" in top or "error" in top):
        return BadFrame(f"a response, {what}", None, chars=chars)
    request_id = top.get("id")
    valid_id = isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool))
    return BadFrame(what, INVALID_REQUEST, request_id if valid_id else None, chars)


class AnsweringBadFrames:
    """The SDK's read stream, whose exception items are answered (through
    `write_stream`, the SDK's) and warned about, never passed on; ended, as if the
    client had closed it, once `ended()` is true."""

    def __init__(self, inner: Any, write_stream: Any, warn: Callable[[str], None],
                 ended: Callable[[], bool] = lambda: False) -> None:
        self._inner = inner
        self._write_stream = write_stream
        self._warn = warn
        self._ended = ended  # once true, the read side closes: the SDK's loop ends the session

    @property
    def last_context(self) -> Any:
        """The context of the item last received (the SDK's streams carry one)."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage:
        while True:
            if self._ended():
                raise anyio.EndOfStream
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            await self._answer(judge(item))

    async def _answer(self, bad: BadFrame) -> None:
        self._warn(bad.describe())
        reply = bad.reply()
        if reply is None:
            return
        try:
            await self._write_stream.send(SessionMessage(message=reply))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._warn("mcp: the connection closed before the refusal was written")

    async def aclose(self) -> None:
        if not self._ended():  # ended: the transport's reader is cancelled, not broken (serve_stdio)
            await self._inner.aclose()

    def __aiter__(self) -> AnsweringBadFrames:
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AnsweringBadFrames:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
