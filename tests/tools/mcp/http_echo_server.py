"""A small streamable-HTTP MCP server (the SDK's own server, on uvicorn) for the
HTTP transport test: one tool, `echo`, behind a check that every request carries
`Authorization: Bearer sesame`, as a real hosted server would. Run as a script:
`python http_echo_server.py PORT`."""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.responses import PlainTextResponse

server = MCPServer("echo")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


app = server.streamable_http_app()


async def guarded(scope, receive, send):  # type: ignore[no-untyped-def]
    headers = dict(scope.get("headers") or [])
    if scope["type"] == "http" and headers.get(b"authorization") != b"Bearer sesame":
        await PlainTextResponse("missing or wrong token", status_code=401)(scope, receive, send)
        return
    await app(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(guarded, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="on")
