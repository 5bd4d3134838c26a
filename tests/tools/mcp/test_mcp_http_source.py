"""A streamable-HTTP server as a tool source: the configured headers are sent (the
server refuses requests without its token), tools are listed and called; a wrong
token is a start failure with a warning, not a hang."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gormes.ops.executor import Executor
from gormes.ops.registry import Registry
from gormes.ops.spec import Caller
from gormes.tools.mcp import open_mcp_sources

HERE = Path(__file__).resolve().parent

# The SDK's HTTP transport (mcp 2.3, httpx2) cancels its SSE stream readers at close and
# leaves their async generators to the garbage collector, which warns: theirs, not ours.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture
def http_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(HERE / "http_echo_server.py"), str(port)])
    try:
        for _ in range(300):  # until it accepts connections (not a timed assertion: a readiness wait)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("the HTTP MCP server exited") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def test_an_http_server_gets_its_headers_and_serves_its_tools(store, mcp_config, http_server) -> None:
    config = mcp_config(echo={"url": http_server, "headers": {"Authorization": "Bearer sesame"}})
    registry = Registry()
    async with open_mcp_sources(config, registry, store=store) as sources:
        assert sources.warnings == [] and sources.statuses["echo"].transport == "http"
        assert registry.input_schema("mcp.echo.echo")["required"] == ["text"]
        out = await Executor(registry, store).call("mcp.echo.echo", {"text": "hi"}, Caller(trust="operator", id="cli"))
        assert out.content[0]["text"] == "echo: hi"


async def test_a_wrong_token_is_a_start_failure_with_a_warning(store, mcp_config, http_server) -> None:
    config = mcp_config(echo={"url": http_server, "headers": {"Authorization": "Bearer wrong"}, "startup_timeout": 5})
    async with open_mcp_sources(config, Registry(), store=store) as sources:
        status = sources.statuses["echo"]
        assert status.state == "failed" and status.operations == []
        assert status.error.startswith(f"mcp server 'echo' failed to start (url {http_server})")
        assert len(sources.warnings) == 1
