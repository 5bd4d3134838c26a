"""An external MCP server's tool as an operation: `mcp.<server>.<tool>`.

- The name: the tool's name made carriable (anything outside [A-Za-z0-9_-]
  becomes `_`); the call still uses the tool's real name.
- The input: the server's own JSON schema (`OperationSpec.schema`); the executor
  checks a JSON object, the server validates the rest.
- Trust: what the configuration grants. A tool only the operator may call is not
  prompt-visible (the registry's rule: a model is never offered what only an
  operator may run): the operator calls it with `gormes ops call`; a model is
  offered it only when the configuration grants its run's class.
- mutating / idempotent: from the tool's hints when it gives them (`readOnlyHint`:
  not mutating, so idempotent; `idempotentHint`), else the safe assumption: it
  mutates and is not idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types
import msgspec

from gormes.events.mcp import CatalogTool
from gormes.ops.registry import wire_name
from gormes.ops.spec import OperationContext, OperationSpec
from gormes.tools.mcp.config import McpServer
from gormes.tools.mcp.connection import McpCallError, cut

AUDIT_KIND = "mcp"
_NOT_CARRIABLE = re.compile(r"[^A-Za-z0-9_-]")
WIRE_MAX = 64


class McpToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool returned: its content blocks as the server sent them (text,
    image, resource, ...), and its structured content when it gave one."""

    content: list[dict[str, Any]]
    structured: dict[str, Any] | None = None


Call = Callable[[str, dict[str, Any]], Awaitable[McpToolResult]]


def operation_name(server: str, tool: str) -> str:
    return f"mcp.{server}.{_NOT_CARRIABLE.sub('_', tool)}"


def source_of(server: str) -> str:
    return f"mcp:{server}"


def catalog_tool(tool: mcp_types.Tool) -> CatalogTool:
    hints = tool.annotations
    return CatalogTool(
        name=tool.name, description=tool.description or "", input_schema=dict(tool.input_schema),
        read_only=None if hints is None else hints.read_only_hint,
        idempotent=None if hints is None else hints.idempotent_hint,
        destructive=None if hints is None else hints.destructive_hint,
    )


def tool_spec(server: McpServer, tool: CatalogTool, call: Call) -> OperationSpec:
    """The operation of one tool; `call(real_name, arguments)` serves it."""
    config = server.config
    trust = frozenset(config.trust)
    read_only = tool.read_only is True
    real = tool.name

    async def handler(ctx: OperationContext, arguments: dict[str, Any]) -> McpToolResult:
        return await call(real, arguments)

    return OperationSpec(
        name=operation_name(server.name, tool.name),
        description=tool.description.strip() or f"{tool.name} (a tool of the MCP server {server.name!r})",
        input_type=dict, output_type=McpToolResult, handler=handler, trust=trust, audit_kind=AUDIT_KIND,
        mutating=not read_only,
        idempotent=True if read_only else tool.idempotent is True,
        prompt_visible=trust != frozenset({"operator"}),
        timeout=config.timeout, schema=tool.input_schema, source=source_of(server.name),
        requires_approval=config.require_approval is True or (
            isinstance(config.require_approval, list) and real in config.require_approval),
    )


def refusal(server: str, tool: str, taken: set[str]) -> str | None:
    """Why the tool cannot be an operation (a name taken, one too long for the
    wire), or None."""
    name = operation_name(server, tool)
    if name in taken:
        return f"mcp server {server!r}: tool {tool!r} skipped: its operation name {name} is taken"
    wire = wire_name(name)
    if len(wire) > WIRE_MAX:
        return (f"mcp server {server!r}: tool {tool!r} skipped: its wire name {wire!r} is longer than"
                f" {WIRE_MAX} characters, which no provider can carry")
    return None


def result_of(server: str, tool: str, result: mcp_types.CallToolResult) -> McpToolResult:
    """The tool's result, or the McpCallError its `isError` result stands for."""
    blocks = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]
    if result.is_error:
        text = " ".join(b.get("text", "") for b in blocks if b.get("type") == "text").strip()
        raise McpCallError(f"mcp server {server!r}: {tool} returned an error: {cut(' '.join(text.split())) or 'no text'}")
    structured = result.structured_content
    return McpToolResult(content=blocks, structured=dict(structured) if isinstance(structured, dict) else None)
