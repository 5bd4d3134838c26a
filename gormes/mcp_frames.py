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
  response's id would answer one of the client's own requests;
- a request whose id is neither a string nor an integer (`true`, `1.5`, `null`),
  which the SDK reads as a notification (its model ignores the extra member):
  -32600, id null, and the notification is not passed on (decision 0077). The SDK
  keeps nothing of the id, so the line is read again: `KeptLines`, the stdin
  the SDK's reader is given, keeps each line until its item is received.

Each is one warning line on stderr, which says what the frame was and its size,
never its content.
"""

from __future__ import annotations

import json
import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from io import TextIOWrapper
from typing import Any, NoReturn

import anyio
import msgspec
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCNotification, RequestId
from pydantic import ValidationError

from gormes.events.json_nesting import MAX_NESTING, nesting_depth_over, top_level

try:  # the SDK's private helpers (mcp 2.3): how its stdio_server claims fd 0
    from mcp.server.stdio import _claim_fd, _open_stdin_diversion
except ImportError:  # pragma: no cover - a later SDK; tests/mcp pins that this one has them
    _claim_fd = _open_stdin_diversion = None  # type: ignore[assignment]

NOT_JSON = "not JSON"
TOO_DEEP = f"nested deeper than {MAX_NESTING} levels"
NOT_AN_OBJECT = "not one JSON object (batches are not served)"
NOT_A_MESSAGE = "not a JSON-RPC 2.0 message"
NO_REQUEST_ID = "a request whose id is neither a string nor an integer"
# How long an ended connection's calls in flight have to be answered before its read side ends.
ENDED_GRACE_S = 0.2


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


class _Head(msgspec.Struct):
    """A frame's top-level `method` and `id`, whether its `id` is there (UNSET: absent)."""

    method: Any = None
    id: Any = msgspec.UNSET


def judge_notification(message: JSONRPCNotification, line: str) -> BadFrame | None:
    """The frame the SDK read as `message` from `line` is refused if the line has an
    `id` member: a request (JSON-RPC 2.0 makes every object with an id one) whose id
    is no MCP `RequestId`, since one that is would have been read as a request.
    None: a notification, or a line that is not `message`'s (its method differs),
    passed on as the SDK read it."""
    try:
        head = msgspec.json.decode(line, type=_Head)
    except msgspec.DecodeError:  # the SDK's parser took what msgspec's does not
        return None
    if head.id is msgspec.UNSET or head.method != message.method:
        return None
    return BadFrame(NO_REQUEST_ID, INVALID_REQUEST, None, len(line))


class KeptLines:
    """The stdin the SDK's stdio reader is given (`async for line in stdin`): the
    lines of `inner`, each kept until `taken`. The SDK's reader sends one item down
    its read stream a line, in order, so the item `AnsweringBadFrames` receives is
    made of the line it takes; at most the line being parsed and the one after it
    wait here (the read stream holds no buffer)."""

    def __init__(self, inner: Any) -> None:
        self._inner = aiter(inner)
        self._lines: deque[str] = deque()

    def __aiter__(self) -> KeptLines:
        return self

    async def __anext__(self) -> str:
        line = await self._inner.__anext__()
        self._lines.append(line)
        return line

    def taken(self) -> str | None:
        """The line of the item just received (None: no line is kept)."""
        return self._lines.popleft() if self._lines else None


class _AbandonedOnCancel:
    """The lines of a text file, each read in a worker thread that a cancel abandons
    (`anyio.wrap_file`'s waits for its line): a server that ends a connection itself
    (`AnsweringBadFrames`'s `ended`) exits at once, not when its client next writes
    a line or closes (decision 0081). The thread left reading dies with the process."""

    def __init__(self, file: TextIOWrapper) -> None:
        self._file = file

    def __aiter__(self) -> _AbandonedOnCancel:
        return self

    async def __anext__(self) -> str:
        line = await anyio.to_thread.run_sync(self._file.readline, abandon_on_cancel=True)
        if not line:
            raise StopAsyncIteration
        return line


class _UnownedText(TextIOWrapper):
    """A text layer that never closes its buffer: the wire's, not the transport's."""

    def close(self) -> None:
        try:
            self.detach()
        except ValueError:
            pass


@contextmanager
def claimed_stdin() -> Iterator[KeptLines | None]:
    """The process's stdin as the SDK's `stdio_server` reads it when given none
    (UTF-8, undecodable bytes replaced), claimed the way it claims it: fd 0 points
    at the null device while serving, so a child reads EOF, not the wire (the
    SDK's own `_claim_fd`; it refuses a second claim), and is restored after.
    None where the SDK has no such helper (a later SDK): the SDK then claims stdin
    itself, and a request with a bad id goes unanswered, as before decision 0077."""
    if _claim_fd is None:  # pragma: no cover - see the import
        yield None
        return
    buffer, release = _claim_fd(0, sys.stdin, "rb", _open_stdin_diversion)
    try:
        yield KeptLines(_AbandonedOnCancel(_UnownedText(buffer, encoding="utf-8", errors="replace")))
    finally:
        if release is not None:
            release()


class AnsweringBadFrames:
    """The SDK's read stream, whose exception items are answered (through
    `write_stream`, the SDK's) and warned about, never passed on; ended, as if the
    client had closed it, ENDED_GRACE_S after `ended()` is found true (no frame is
    passed on after it). With `lines`, the stdin the SDK
    reads, a notification whose line has an id is answered so too."""

    def __init__(self, inner: Any, write_stream: Any, warn: Callable[[str], None],
                 ended: Callable[[], bool] = lambda: False, lines: KeptLines | None = None) -> None:
        self._inner = inner
        self._write_stream = write_stream
        self._warn = warn
        self._ended = ended  # once true, the read side closes: the SDK's loop ends the session
        self._lines = lines

    @property
    def last_context(self) -> Any:
        """The context of the item last received (the SDK's streams carry one)."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage:
        while True:
            if self._ended():
                await self._end()
            item = await self._inner.receive()
            line = None if self._lines is None else self._lines.taken()
            if self._ended():  # it ended while this frame was awaited: the frame is not served
                await self._end()
            if isinstance(item, Exception):
                await self._answer(judge(item))
                continue
            if line is not None and isinstance(item.message, JSONRPCNotification):
                bad = judge_notification(item.message, line)
                if bad is not None:
                    await self._answer(bad)
                    continue
            return item

    async def _end(self) -> NoReturn:
        """End the read side, once the calls in flight had ENDED_GRACE_S to be
        answered: the SDK cancels those still running when it ends, and with them
        the answers they hold (the refusal that ended the connection among them)."""
        await anyio.sleep(ENDED_GRACE_S)
        raise anyio.EndOfStream

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
