"""Issue 16's bad input, through the CLI: an operation declared twice, an MCP
configuration naming an unknown trust class or a file that is not there, a tool
name no provider can carry: one `gormes: error:` line each, exit 2, and a
database that was not there is not created."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, run_gormes

WEATHER = '''
import msgspec
import gormes

class WeatherIn(msgspec.Struct, frozen=True, kw_only=True):
    city: str

@gormes.operation({name!r})
async def weather(ctx: gormes.OperationContext, input: WeatherIn) -> dict:
    """The weather."""
    return {{"city": input.city}}
'''


def tool_file(tmp_path: Path, file: str, name: str) -> str:
    path = tmp_path / file
    path.write_text(WEATHER.format(name=name))
    return str(path)


@pytest.mark.parametrize("command", [("run", "agent", "--prompt", "x", "--model", "scripted:none.json"),
                                     ("worker",), ("ops", "list")])
def test_an_operation_declared_twice_is_one_line(tmp_path, command):
    db = tmp_path / "gormes.db"
    one, two = tool_file(tmp_path, "one.py", "weather.get"), tool_file(tmp_path, "two.py", "weather.get")
    line = assert_one_line_error(run_gormes(db, *command, "--import", one, "--import", two))
    assert "declared twice" in line and "one.py" in line and "two.py" in line
    assert not db.exists()


def test_a_name_no_provider_can_carry_is_one_line(tmp_path):
    db = tmp_path / "gormes.db"
    long = tool_file(tmp_path, "long.py", "weather." + "x" * 60)
    ran = run_gormes(db, "run", "agent", "--prompt", "x", "--import", long)
    line = assert_one_line_error(ran)
    assert ran.returncode == 2 and "no provider can carry it" in line
    assert not db.exists()


@pytest.mark.parametrize(("config", "says"), [
    ({"mcpServers": {"time": {"command": "mcp-server-time", "trust": ["admin"]}}}, "unknown trust class 'admin'"),
    ({"mcpServers": {"time": {"command": "mcp-server-time", "colour": "blue"}}}, "colour"),
    (None, "cannot read"),
])
@pytest.mark.parametrize("command", [("run", "agent", "--prompt", "x", "--model", "scripted:none.json"),
                                     ("worker",), ("ops", "list"), ("doctor",)])
def test_a_bad_mcp_configuration_is_one_line_before_the_database_is_touched(tmp_path, config, says, command):
    db = tmp_path / "gormes.db"
    path = tmp_path / "servers.json"
    if config is not None:
        path.write_text(json.dumps(config))
    ran = run_gormes(db, *command, "--mcp-config", str(path))
    line = assert_one_line_error(ran)
    assert ran.returncode == 2 and says in line, line
    assert not db.exists()
