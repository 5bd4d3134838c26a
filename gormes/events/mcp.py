"""Events of the external MCP servers gormes uses as tool sources (gormes/tools/mcp/).

Each server's stream `mcp-<server>` holds one `mcp.catalog_listed` per change of
the tools it lists: what they were (names, descriptions, input schemas, hints) and
a hash of them. The latest one is what gormes offers when the server cannot start
(its tools then fail with the start error, but a run sees the same tools), and
what the doctor compares against.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from gormes.events.base import Event


def mcp_stream(server: str) -> str:
    return f"mcp-{server}"


class CatalogTool(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One tool as the server listed it (its real name, not the operation's)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool | None = None  # the tool's annotations, when it gave them
    idempotent: bool | None = None
    destructive: bool | None = None


class McpCatalogListed(Event, tag="mcp.catalog_listed", kw_only=True, gc=False):
    server: str
    tools: tuple[CatalogTool, ...]
    sha256: str  # of the tools, canonical JSON: `catalog_digest`
    server_version: str | None = None  # the server's own name and version, if it said
    at: int = 0  # ms since the epoch


def catalog_digest(tools: tuple[CatalogTool, ...]) -> str:
    return hashlib.sha256(msgspec.json.encode(tools, order="deterministic")).hexdigest()
