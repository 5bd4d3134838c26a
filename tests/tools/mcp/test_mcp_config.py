"""The MCP configuration file: Claude Desktop's JSON shape and TOML, checked into
typed structs; anything wrong is one line naming the file, the server and what."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gormes.errors import UserError
from gormes.tools.mcp.config import McpConfigError, load_config


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_pasted_claude_desktop_file_reads_with_gormes_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "claude.json", json.dumps({"mcpServers": {
        "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
        "remote": {"type": "http", "url": "https://mcp.example.invalid/mcp", "headers": {"Authorization": "Bearer x"}},
    }}))
    config = load_config(path)
    time, remote = config.servers
    assert (time.name, time.config.command, time.config.args, time.config.env) == (
        "time", "uvx", ["mcp-server-time"], {"TZ": "UTC"})
    assert (time.config.trust, time.config.timeout, time.config.startup_timeout) == (["operator"], 30.0, 10.0)
    assert time.config.transport == "stdio" and remote.config.transport == "http"
    assert remote.config.headers == {"Authorization": "Bearer x"}


def test_toml_tables_carry_gormes_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "mcp.toml", """
[mcp_servers.git]
command = "mcp-server-git"
trust = ["operator", "system"]
timeout = 5
startup_timeout = 3
tools = ["git_status"]

[mcp_servers.off]
command = "whatever"
enabled = false
""")
    config = load_config(path)
    git = config.servers[0].config
    assert (git.trust, git.timeout, git.startup_timeout, git.tools) == (["operator", "system"], 5, 3, ["git_status"])
    assert [s.name for s in config.enabled] == ["git"]


@pytest.mark.parametrize(("body", "says"), [
    ({"command": "x", "trust": ["operator", "admin"]}, "unknown trust class 'admin'"),
    ({"command": "x", "colour": "red"}, "unknown field"),
    ({"args": ["x"]}, "either `command` (stdio) or `url`"),
    ({"command": "x", "url": "http://h/mcp"}, "either `command` (stdio) or `url`"),
    ({"url": "ftp://h/mcp"}, "must start with http"),
    ({"url": "http://h/mcp", "args": ["a"]}, "not `args`"),
    ({"command": "x", "timeout": 0}, "`timeout` must be > 0"),
    ({"command": "x", "trust": []}, "`trust` is empty"),
    ({"command": "x", "timeout": "soon"}, "Expected `float"),
])
def test_a_bad_server_is_one_line_naming_file_and_server(tmp_path: Path, body: dict, says: str) -> None:
    path = write(tmp_path, "mcp.json", json.dumps({"mcpServers": {"srv": body}}))
    with pytest.raises(McpConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert isinstance(caught.value, UserError)
    assert "\n" not in message and says in message
    assert message.startswith(f"{path}: server 'srv'")


@pytest.mark.parametrize("name", ["Time", "my.server", "1st", "a b"])
def test_a_server_name_must_fit_an_operation_name(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, "mcp.json", json.dumps({"mcpServers": {name: {"command": "x"}}}))
    with pytest.raises(McpConfigError, match="server name must be lowercase"):
        load_config(path)


@pytest.mark.parametrize(("name", "text", "says"), [
    ("mcp.json", "{not json", "not JSON"),
    ("mcp.toml", "[mcp_servers.x\n", "not TOML"),
    ("mcp.yaml", "x: 1", "must be a .json or .toml file"),
    ("mcp.json", '{"mcpServers": []}', "expected a table of servers"),
])
def test_a_file_that_is_not_a_configuration(tmp_path: Path, name: str, text: str, says: str) -> None:
    with pytest.raises(McpConfigError, match=says):
        load_config(write(tmp_path, name, text))


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(McpConfigError, match="cannot read the MCP configuration"):
        load_config(tmp_path / "absent.json")
