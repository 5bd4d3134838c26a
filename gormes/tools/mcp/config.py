"""The MCP servers a user declares, read into typed structs.

Two shapes, chosen by the file's suffix:

- `.json`: the `{"mcpServers": {NAME: {...}}}` shape Claude Desktop and Cursor
  use, so a user can paste theirs;
- `.toml`: `[mcp_servers.NAME]` tables.

A server is stdio (`command`, `args`, `env`, `cwd`) or streamable HTTP (`url`,
`headers`), plus gormes' own keys: `trust` (the trust classes that may call its
tools; default `["operator"]`), `timeout` (seconds per call, default 30),
`startup_timeout` (seconds to start and list tools, default 10), `tools` (an
allowlist of the server's tool names), `require_approval` (true, or a list of
tool names: a run's call waits for `gormes approve`) and `enabled`. Anything wrong is one
`McpConfigError` line naming the file, the server and what.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from gormes.errors import UserError
from gormes.ops.spec import TRUST_CLASSES

SERVER_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


class McpConfigError(UserError):
    """An MCP server configuration that cannot be used."""


class McpServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    trust: list[str] = msgspec.field(default_factory=lambda: ["operator"])
    timeout: float = 30.0
    startup_timeout: float = 10.0
    tools: list[str] | None = None
    enabled: bool = True
    # A run's call of its tools waits for a person's approval: all of them (true)
    # or those named (decision 0033).
    require_approval: bool | list[str] = False
    # Claude Desktop / Cursor files may say which transport; gormes infers it.
    type: str | None = None

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"


class McpServer(msgspec.Struct, frozen=True, kw_only=True):
    """A checked server: its name and its configuration."""

    name: str
    config: McpServerConfig


class McpConfig(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    servers: tuple[McpServer, ...]

    @property
    def enabled(self) -> tuple[McpServer, ...]:
        return tuple(s for s in self.servers if s.config.enabled)


def load_config(path: str | Path) -> McpConfig:
    """Read and check an MCP configuration file (see the module doc)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise McpConfigError(f"{path}: cannot read the MCP configuration: {exc.strerror or exc}") from None
    if path.suffix == ".json":
        try:
            data = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            raise McpConfigError(f"{path}: not JSON: {exc}") from None
        key = "mcpServers"
    elif path.suffix == ".toml":
        try:
            data = tomllib.loads(raw.decode("utf-8", "replace"))
        except tomllib.TOMLDecodeError as exc:
            raise McpConfigError(f"{path}: not TOML: {exc}") from None
        key = "mcp_servers"
    else:
        raise McpConfigError(f"{path}: an MCP configuration must be a .json or .toml file")
    return parse_config(data, key=key, where=str(path))


def parse_config(data: Any, *, key: str, where: str) -> McpConfig:
    if not isinstance(data, dict) or not isinstance(data.get(key, {}), dict):
        raise McpConfigError(f"{where}: expected a table of servers under {key!r}")
    servers = []
    for name, body in data.get(key, {}).items():
        servers.append(McpServer(name=name, config=_server(where, name, body)))
    return McpConfig(path=where, servers=tuple(servers))


def _server(where: str, name: str, body: Any) -> McpServerConfig:
    here = f"{where}: server {name!r}"
    if not isinstance(name, str) or not SERVER_NAME.match(name):
        raise McpConfigError(
            f"{here}: a server name must be lowercase letters, digits, _ and - starting with a letter"
            " (it becomes part of its tools' operation names, mcp.NAME.TOOL)"
        )
    try:
        config = msgspec.convert(body, McpServerConfig)
    except msgspec.ValidationError as exc:
        raise McpConfigError(f"{here}: {exc}") from None
    if (config.command is None) == (config.url is None):
        raise McpConfigError(f"{here}: give either `command` (stdio) or `url` (streamable HTTP), not both or neither")
    if config.command is not None and (config.headers or not config.command.strip()):
        raise McpConfigError(f"{here}: a stdio server needs a non-empty `command` and takes no `headers`")
    if config.url is not None and (config.args or config.env or config.cwd):
        raise McpConfigError(f"{here}: an HTTP server takes `url` and `headers`, not `args`, `env` or `cwd`")
    if config.url is not None and not config.url.startswith(("http://", "https://")):
        raise McpConfigError(f"{here}: `url` must start with http:// or https://")
    unknown = [t for t in config.trust if t not in TRUST_CLASSES]
    if unknown:
        raise McpConfigError(
            f"{here}: unknown trust class {unknown[0]!r} (known: {', '.join(TRUST_CLASSES)})"
        )
    if not config.trust:
        raise McpConfigError(f"{here}: `trust` is empty: no one could call its tools")
    for label, value in (("timeout", config.timeout), ("startup_timeout", config.startup_timeout)):
        if not value > 0:
            raise McpConfigError(f"{here}: `{label}` must be > 0 seconds")
    return config
