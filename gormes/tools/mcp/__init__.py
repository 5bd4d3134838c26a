"""External MCP servers as tool sources: each tool of a configured server becomes
the operation `mcp.<server>.<tool>`, checked, audited and recorded like any other.

config.py reads the configuration file (Claude Desktop's JSON shape or TOML);
connection.py is one server's client session (the `mcp` SDK's); specs.py turns a
listed tool into an OperationSpec; sources.py starts them all and registers their
tools (`open_mcp_sources`, the one entry point); doctor.py checks them.
"""

from gormes.tools.mcp.config import McpConfig, McpConfigError, McpServer, McpServerConfig, load_config
from gormes.tools.mcp.connection import McpCallError, McpStartError
from gormes.tools.mcp.sources import McpSources, ServerStatus, open_mcp_sources
from gormes.tools.mcp.specs import McpToolResult, operation_name

__all__ = [
    "McpCallError", "McpConfig", "McpConfigError", "McpServer", "McpServerConfig", "McpSources",
    "McpStartError", "McpToolResult", "ServerStatus", "load_config", "open_mcp_sources", "operation_name",
]
