"""Where a command's operations come from: the built-ins, what `--import` declared
(gormes/tools/imports.py, loaded before this), and the tools of the external MCP
servers a configuration file names (gormes/tools/mcp/), started for as long as the
block runs.

    load_imports(imports)
    async with operation_registry(store, mcp_config, warn=print_warning) as registry:
        executor = Executor(registry, store, ...)

A server that cannot start is a warning (its tools, from its last recorded
catalog, fail with the reason), never a hang or a failed command; a bad
configuration file is one `UserError` line before any server starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from gormes.ops.registry import Registry
from gormes.tools.builtin import default_registry

if TYPE_CHECKING:
    from gormes.events.store import EventStore
    from gormes.tools.mcp import McpConfig

MCP_CONFIG_ENV = "GORMES_MCP_CONFIG"


def read_mcp_config(mcp_config: str | Path | McpConfig | None) -> McpConfig | None:
    """The configuration file read and checked (a `UserError` line if it is bad):
    for a command to refuse a bad file before it opens the database."""
    if mcp_config is None:
        return None
    from gormes.tools.mcp import McpConfig, load_config  # ~1 s of imports: see below

    return mcp_config if isinstance(mcp_config, McpConfig) else load_config(mcp_config)


@asynccontextmanager
async def operation_registry(
    store: EventStore | None, mcp_config: str | Path | McpConfig | None = None, *,
    warn: Callable[[str], None] | None = None,
) -> AsyncIterator[Registry]:
    """`default_registry()`, plus the configured MCP servers' tools while the block runs."""
    registry = default_registry()
    if mcp_config is None:
        yield registry
        return
    # Lazy for start-up time (the mcp SDK costs about a second to import): loaded
    # only by a command given a configuration.
    from gormes.tools.mcp import open_mcp_sources

    async with open_mcp_sources(mcp_config, registry, store=store) as sources:
        for warning in sources.warnings:
            if warn is not None:
                warn(warning)
        yield registry
