"""One connection to one external MCP server, through the `mcp` SDK's client.

The SDK's transports and `ClientSession` are async context managers that must be
entered and left in one task, so each connection lives in a task of its own (in
the sources' nursery) and the operations' handlers, in whatever task a run calls
them from, send their requests through its session.

Nothing waits without a bound: starting (spawning or connecting, `initialize`,
`tools/list`) has the server's `startup_timeout`, each call the operation's timeout
(the executor's). A server that drops (its process exits, the HTTP stream breaks)
fails the call that finds it with a clear error and is started again, once, by
the next call.
"""

from __future__ import annotations

import tempfile
from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp_types
import trio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED

from gormes.ops.spec import OperationError
from gormes.tools.mcp.command import resolved
from gormes.tools.mcp.config import McpServer

ERROR_MAX = 240
# What a call raises when the session's streams are gone (the server exited).
_DROPPED = (
    anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream,
    trio.BrokenResourceError, trio.ClosedResourceError, OSError, EOFError,
)


class McpStartError(OperationError):
    """A server that could not be started, connected to, or listed."""


class McpCallError(OperationError):
    """A tool call that failed: the tool's own error (`isError`), a protocol error,
    or the server gone."""


class Listed:
    """What a server said when it started."""

    def __init__(self, tools: list[mcp_types.Tool], server_version: str | None) -> None:
        self.tools = tools
        self.server_version = server_version


class McpConnection:
    def __init__(self, server: McpServer, nursery: trio.Nursery) -> None:
        self.server = server
        self.name = server.name
        self._nursery = nursery
        self._session: ClientSession | None = None
        self._closing: trio.Event | None = None
        self._lock = trio.Lock()  # one (re)start at a time
        self.starts = 0  # how many times the server was started (or tried)
        self.dropped: str | None = None  # why the last session ended, if it did

    @property
    def connected(self) -> bool:
        return self._session is not None

    async def start(self) -> Listed:
        """Start the server and list its tools within its startup timeout, or raise
        `McpStartError` with one line saying why."""
        self.starts += 1
        timeout = self.server.config.startup_timeout
        with trio.move_on_after(timeout) as bound:
            return await self._nursery.start(self._serve)  # type: ignore[no-any-return]
        assert bound.cancelled_caught
        raise McpStartError(f"mcp server {self.name!r} did not start within {timeout:g}s ({self._where()})")

    async def call(self, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call `tool`; a dropped session is started again first, once per call."""
        if self._session is None:
            async with self._lock:
                if self._session is None:
                    await self.start()
        session = self._session
        assert session is not None
        try:
            result = await session.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise McpCallError(f"mcp server {self.name!r}: {tool} failed: {cut(str(exc))}") from None
            self._drop(session, "the connection closed")
        except _DROPPED as exc:
            self._drop(session, one_line(exc))
        except Exception as exc:  # noqa: BLE001 - whatever else the SDK raises is this call's failure
            raise McpCallError(f"mcp server {self.name!r}: {tool} failed: {one_line(exc)}") from None
        else:
            return result
        raise McpCallError(
            f"mcp server {self.name!r} dropped ({self.dropped}) during {tool}; it is started again on the next call"
        )

    def close(self) -> None:
        if self._closing is not None:
            self._closing.set()

    def _drop(self, session: ClientSession, why: str) -> None:
        if self._session is session:
            self._session = None
            self.dropped = why
            self.close()

    def _where(self) -> str:
        config = self.server.config
        return f"command {config.command!r}" if config.command is not None else f"url {config.url}"

    async def _serve(self, task_status: trio.TaskStatus[Listed] = trio.TASK_STATUS_IGNORED) -> None:
        closing = self._closing = trio.Event()
        started = False
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            try:
                async with AsyncExitStack() as stack:
                    read, write = await stack.enter_async_context(self._transport(stack, errlog))
                    session = await stack.enter_async_context(ClientSession(read, write))
                    init = await session.initialize()
                    tools = await _list_tools(session)
                    info = init.server_info
                    version = f"{info.name} {info.version}" if info is not None else None
                    self._session, self.dropped = session, None
                    started = True
                    task_status.started(Listed(tools, version))
                    await closing.wait()
            except Exception as exc:  # noqa: BLE001 - a server's failure is reported, not raised into the nursery
                why = one_line(exc)
                if not started:
                    tail = _stderr_tail(errlog)
                    raise McpStartError(
                        f"mcp server {self.name!r} failed to start ({self._where()}): {why}"
                        + (f"; its stderr: {tail}" if tail else "")
                    ) from None
                self.dropped = self.dropped or why
            finally:
                if self._closing is closing:
                    self._session = None

    def _transport(self, stack: AsyncExitStack, errlog: Any) -> Any:
        config = self.server.config
        if config.command is not None:
            params = StdioServerParameters(
                command=resolved(config.command, config.env), args=list(config.args), env=dict(config.env) or None,
                cwd=config.cwd,
            )
            return stdio_client(params, errlog=errlog)
        client = create_mcp_http_client(headers=dict(config.headers) or None)
        return _with_client(stack, client, config.url)


async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    while True:
        params = None if cursor is None else mcp_types.PaginatedRequestParams(cursor=cursor)
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


class _with_client:
    """streamable_http_client over an httpx client the exit stack closes after it."""

    def __init__(self, stack: AsyncExitStack, client: Any, url: str | None) -> None:
        self._stack, self._client, self._url = stack, client, url
        self._inner: Any = None

    async def __aenter__(self) -> Any:
        await self._stack.enter_async_context(self._client)
        self._inner = streamable_http_client(self._url or "", http_client=self._client)
        return await self._inner.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


def one_line(exc: BaseException) -> str:
    """The first leaf error of an exception (group) as `Type: message`, on one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())
    if isinstance(exc, MCPError):
        return cut(text or "MCP error")
    return cut(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _stderr_tail(errlog: Any) -> str:
    try:
        errlog.flush()
        errlog.seek(0)
        lines = [line.strip() for line in errlog.read().splitlines() if line.strip()]
    except (OSError, ValueError):
        return ""
    return cut(lines[-1]) if lines else ""


def cut(text: str) -> str:
    return text if len(text) <= ERROR_MAX else text[: ERROR_MAX - 1] + "…"

