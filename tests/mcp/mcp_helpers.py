"""Helpers for the MCP tests: a real `gormes mcp` subprocess driven by the MCP
client SDK over stdio, and readers of what the calls left in the log."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from gormes.events.audit import OperationAudited

CLIENT_NAME = "gormes-tests"


@asynccontextmanager
async def gormes_mcp(
    db: Path | str, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
    client_name: str = CLIENT_NAME,
) -> AsyncIterator[Client]:
    """`gormes --db DB mcp ARGS...` as a subprocess (in `cwd` when given, with
    `env` over the SDK's few inherited variables), connected and initialized. DB may
    be a PostgreSQL URL. `client_name`: the name the client gives itself."""
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "gormes", "--db", str(db), "mcp", *args], cwd=cwd, env=env,
    )
    client_info = types.Implementation(name=client_name, version="1")
    async with Client(server, client_info=client_info, read_timeout_seconds=60) as client:
        yield client


async def tool_names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


async def call_ok(client: Client, tool: str, **arguments: Any) -> Any:
    """Call a tool that must succeed; its structured output."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def call_refused(client: Client, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail; the one line of its error."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return result.content[0].text


async def audit_events(store: Any) -> list[OperationAudited]:
    return [r.event for r in await store.read_all(types=["audit.operation"])]
