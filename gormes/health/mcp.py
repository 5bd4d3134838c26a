"""MCP server checks: given an MCP configuration (gormes/tools/mcp/config.py), one
check per enabled server, `mcp.<server>`, that starts it within its startup
timeout and lists its tools, exactly as a run would (`open_mcp_sources`, with no
store: nothing is recorded). A server that fails to start, or whose tools cannot
all be operations, is a warning: runs still work, without those tools.

`--offline` skips them: starting a server runs its command or reaches its URL.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import trio

from gormes.health import Check, DoctorContext, Verdict, listing, ok, warn
from gormes.ops.registry import Registry
from gormes.tools.mcp.config import McpConfig, McpServer
from gormes.tools.mcp.sources import ServerStatus, open_mcp_sources

OFFLINE = "starts the MCP server (--offline starts none)"


def mcp_checks(config: McpConfig) -> list[Check]:
    return [
        Check(name=f"mcp.{server.name}", category="mcp", run=_check_of(config, server),
              needs_database=False, offline_skip=OFFLINE)
        for server in config.enabled
    ]


def _check_of(config: McpConfig, server: McpServer):  # type: ignore[no-untyped-def]
    def check(ctx: DoctorContext) -> Verdict:
        status, warnings = probe(config, server)
        return verdict(config, server, status, warnings)

    return check


def probe(config: McpConfig, server: McpServer) -> tuple[ServerStatus, list[str]]:
    """Start one server and list its tools; in a thread of its own, so the doctor
    may be called from inside a trio run too."""

    async def start() -> tuple[ServerStatus, list[str]]:
        one = McpConfig(path=config.path, servers=(server,))
        async with open_mcp_sources(one, Registry()) as sources:
            return sources.statuses[server.name], list(sources.warnings)

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(trio.run, start).result()


def verdict(config: McpConfig, server: McpServer, status: ServerStatus, warnings: list[str]) -> Verdict:
    where = (f"`{' '.join([server.config.command or '', *server.config.args])}`"
             if server.config.command is not None else server.config.url)
    if status.state == "failed":
        return warn(
            status.error or f"mcp server {server.name!r} failed to start",
            f"check server {server.name!r} in {config.path}: run {where} by hand and see that it starts; "
            "until then runs are not offered its tools",
        )
    tools = f"{len(status.operations)} tools ({listing(status.operations, 4)})"
    if warnings:
        return warn(
            f"mcp server {server.name!r} started with {tools}, but: {listing(warnings, 2)}",
            f"rename or drop the tools it skips with `tools` in {config.path}",
        )
    return ok(f"mcp server {server.name!r} started and listed {tools}")
