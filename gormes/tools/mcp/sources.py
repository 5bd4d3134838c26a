"""External MCP servers as tool sources: one async context manager does it all.

    async with open_mcp_sources("mcp.json", registry, store=store) as sources:
        executor = Executor(registry, store, ...)   # mcp.time.get_current_time is in it
        sources.warnings                            # one line per server or tool that is missing

On entry every enabled server of the configuration starts at once, each within its
`startup_timeout`; each lists its tools, which are registered in `registry` as
operations (gormes/tools/mcp/specs.py), and its catalog is recorded on its stream
`mcp-<server>` when it changed (gormes/events/mcp.py). A server that fails to start
does not stop the others: its tools come from its last recorded catalog, if any,
with handlers that fail with the start error (a run sees the same tools and gets a
clear tool error), else it has none; either way a warning says so. On exit the
servers are stopped (each stop is bounded by the SDK's own timeouts).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import msgspec
import trio

from gormes.errors import ConcurrencyError
from gormes.events.mcp import CatalogTool, McpCatalogListed, catalog_digest, mcp_stream
from gormes.events.store import EventStore
from gormes.ops.registry import Registry
from gormes.ops.spec import InvalidOperationSpec
from gormes.tools.mcp.config import McpConfig, McpServer, load_config
from gormes.tools.mcp.connection import McpConnection, McpStartError
from gormes.tools.mcp.specs import McpToolResult, catalog_tool, refusal, result_of, tool_spec


class ServerStatus(msgspec.Struct, frozen=True, kw_only=True):
    """How one configured server stands after `open_mcp_sources` started it."""

    name: str
    state: Literal["ready", "failed", "disabled"]
    transport: str  # "stdio" or "http"
    operations: list[str]  # the operations registered for its tools
    from_catalog: bool = False  # its tools came from the last recorded catalog
    error: str | None = None  # why it failed to start


class McpSources:
    """The started servers: `statuses` (one per configured server, in the file's
    order), `warnings` (one line each), and the connections the handlers use."""

    def __init__(self, config: McpConfig) -> None:
        self.config = config
        self.statuses: dict[str, ServerStatus] = {}
        self.warnings: list[str] = []
        self.connections: dict[str, McpConnection] = {}

    def caller_for(self, server: str, start_error: str | None) -> Callable[[str, dict[str, Any]], Any]:
        async def call(tool: str, arguments: dict[str, Any]) -> McpToolResult:
            if start_error is not None:
                raise McpStartError(start_error)
            return result_of(server, tool, await self.connections[server].call(tool, arguments))

        return call


@asynccontextmanager
async def open_mcp_sources(
    config: McpConfig | str | Path,
    registry: Registry,
    *,
    store: EventStore | None = None,
    clock: Callable[[], float] = time.time,
) -> AsyncIterator[McpSources]:
    """Start the configured servers and register their tools in `registry` (see
    the module doc); `config` is a loaded `McpConfig` or the path of its file (a
    bad file raises `McpConfigError`, one line). `store`: where catalogs are
    recorded and read back for a server that fails to start (None: neither)."""
    if not isinstance(config, McpConfig):
        config = load_config(config)
    sources = McpSources(config)
    body_error: BaseException | None = None
    async with trio.open_nursery() as servers:
        try:
            listed: dict[str, tuple[list[CatalogTool], str | None] | McpStartError] = {}
            async with trio.open_nursery() as starting:
                for server in config.enabled:
                    connection = sources.connections[server.name] = McpConnection(server, servers)
                    starting.start_soon(_start, connection, listed)
            for server in config.servers:
                await _register(sources, server, listed.get(server.name), registry, store, clock)
            yield sources
        except BaseException as exc:  # noqa: BLE001 - re-raised below, as itself
            body_error = exc
        finally:
            for connection in sources.connections.values():
                connection.close()
    if body_error is not None:
        raise body_error


async def _start(connection: McpConnection, listed: dict[str, Any]) -> None:
    try:
        started = await connection.start()
    except McpStartError as exc:
        listed[connection.name] = exc
    except BaseExceptionGroup as group:  # a start error raised through the SDK's task groups
        starts, rest = group.split(McpStartError)
        if rest is not None or starts is None:
            raise
        listed[connection.name] = _first(starts)
    else:
        listed[connection.name] = ([catalog_tool(t) for t in started.tools], started.server_version)


def _first(group: BaseException) -> Any:
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


async def _register(
    sources: McpSources, server: McpServer, listed: Any, registry: Registry,
    store: EventStore | None, clock: Callable[[], float],
) -> None:
    config = server.config
    name = server.name
    if not config.enabled:
        sources.statuses[name] = ServerStatus(name=name, state="disabled", transport=config.transport, operations=[])
        return
    start_error: str | None = None
    from_catalog = False
    if isinstance(listed, McpStartError):
        start_error = str(listed)
        last = await last_catalog(store, name) if store is not None else None
        tools = list(last.tools) if last is not None else []
        from_catalog = last is not None
        sources.warnings.append(
            f"{start_error}; " + (f"its {len(tools)} tools from the last recorded catalog fail with that error"
                                  if from_catalog else "it has no tools")
        )
    else:
        tools, version = listed
        if store is not None:
            await record_catalog(store, name, tuple(tools), version, clock)
    if config.tools is not None:
        names = {t.name for t in tools}
        missing = [t for t in config.tools if t not in names]
        if missing and start_error is None:
            sources.warnings.append(f"mcp server {name!r} lists no tool {missing[0]!r} (in its `tools` allowlist)")
        tools = [t for t in tools if t.name in config.tools]
    call = sources.caller_for(name, start_error)
    registered: list[str] = []
    taken = {s.name for s in registry.list()}
    for tool in tools:
        why = refusal(name, tool.name, taken)
        if why is None:
            try:
                spec = registry.register(tool_spec(server, tool, call))
            except InvalidOperationSpec as exc:
                why = f"mcp server {name!r}: tool {tool.name!r} skipped: {exc}"
            else:
                registered.append(spec.name)
                taken.add(spec.name)
        if why is not None:
            sources.warnings.append(why)
    sources.statuses[name] = ServerStatus(
        name=name, state="failed" if start_error else "ready", transport=config.transport,
        operations=registered, from_catalog=from_catalog, error=start_error,
    )


async def last_catalog(store: EventStore, server: str) -> McpCatalogListed | None:
    """The server's latest recorded catalog, or None."""
    stream = mcp_stream(server)
    version = await store.stream_version(stream)
    if version == 0:
        return None
    for record in reversed(await store.read_stream(stream, after_version=version - 1)):
        if isinstance(record.event, McpCatalogListed):
            return record.event
    return None


async def record_catalog(
    store: EventStore, server: str, tools: tuple[CatalogTool, ...], version: str | None,
    clock: Callable[[], float] = time.time,
) -> bool:
    """Append the server's catalog if it differs from the last recorded one; True
    when it was appended."""
    digest = catalog_digest(tools)
    stream = mcp_stream(server)
    last = await last_catalog(store, server)
    if last is not None and last.sha256 == digest:
        return False
    event = McpCatalogListed(server=server, tools=tools, sha256=digest, server_version=version,
                             at=int(clock() * 1000))
    try:
        await store.append(stream, [event], expected_version=await store.stream_version(stream))
    except ConcurrencyError:  # another process recorded it at the same moment
        return False
    return True
