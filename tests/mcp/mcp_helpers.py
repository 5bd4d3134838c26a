"""Helpers for the MCP tests: a real `gormes mcp` subprocess driven by the MCP
client SDK over stdio, and readers of what the calls left in the log."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import trio
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


# A hang guard, not a measure: how long a raw reply may take before the test fails.
RAW_REPLY_TIMEOUT_S = 30


class RawMCP:
    """`gormes mcp` spoken to line by line, no SDK: `send` writes a line, `reply`
    reads the next line of stdout as JSON (failing the test if none comes)."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._pending = b""

    async def send(self, line: str | bytes) -> None:
        data = line.encode() if isinstance(line, str) else line
        assert self.process.stdin is not None
        await self.process.stdin.send_all(data + b"\n")

    async def request(self, request_id: int, method: str, params: dict[str, Any] | None = None) -> None:
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            frame["params"] = params
        await self.send(json.dumps(frame))

    async def reply(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        with trio.fail_after(RAW_REPLY_TIMEOUT_S):
            while b"\n" not in self._pending:
                chunk = await self.process.stdout.receive_some()
                assert chunk, "gormes mcp closed its stdout"
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)


@asynccontextmanager
async def raw_gormes_mcp(db: Path | str, stderr: Path, *args: str) -> AsyncIterator[RawMCP]:
    """`gormes --db DB mcp ARGS...` as a subprocess, its stderr in the file `stderr`,
    initialized by hand; on exit its stdin is closed and it is waited for."""
    with stderr.open("wb") as err:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "gormes", "--db", str(db), "mcp", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
        )
    raw = RawMCP(process)
    try:
        await raw.request(0, "initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": CLIENT_NAME, "version": "1"},
        })
        assert "result" in await raw.reply()
        await raw.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        yield raw
    finally:
        assert process.stdin is not None
        await process.stdin.aclose()
        with trio.move_on_after(RAW_REPLY_TIMEOUT_S):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def calls_until_ended(db: str, name: str, width: int, env: dict[str, str],
                            tool: str = "time__now") -> list[str]:
    """`width` calls of `tool` in flight through one connection (the SDK client,
    named `name`, `gormes mcp` run with `env`) until the server ends it: what each
    call got ("ok", the refusal's line, or "closed")."""
    got: list[str] = []
    async with gormes_mcp(db, env=env, client_name=name) as client:
        async def caller() -> None:
            while True:
                try:
                    result = await client.call_tool(tool, {})
                except Exception:  # noqa: BLE001 - the server ended the connection
                    got.append("closed")
                    nursery.cancel_scope.cancel()
                    return
                got.append(result.content[0].text if result.is_error else "ok")

        with trio.fail_after(60):  # a hang guard: the server must end it
            async with trio.open_nursery() as nursery:
                for _ in range(width):
                    nursery.start_soon(caller)
    return got


async def pipelined_until_ended(raw: RawMCP, sent: int) -> None:
    """`sent` calls of `time__now` written to `raw` without waiting for a reply, until
    the server ends the connection and its process exits."""
    async def pipeline() -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            for n in range(sent):
                await raw.request(n + 1, "tools/call", {"name": "time__now", "arguments": {}})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pipeline)
        with trio.fail_after(120):  # a hang guard: the server must end the connection
            await raw.process.wait()
        nursery.cancel_scope.cancel()
