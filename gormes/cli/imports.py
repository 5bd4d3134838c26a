"""The options that say where a command's operations come from: `--import
MODULE_OR_FILE`, for every command that runs users' code (run, worker, daemon,
mcp, ops, replay, fork, runs resume, doctor; what it loads is
gormes/tools/imports.py `load_imports`), and `--mcp-config FILE`, for those that
call tools (all of them but replay, which serves tools from the log and starts no
server; gormes/tools/sources.py). Only click here: a command's `--help` loads
nothing more."""

from __future__ import annotations

import click

IMPORT_HELP = ("Import a dotted module or a .py file first: its operations (@gormes.operation), "
               "run handlers and job handlers; repeatable.")

import_option = click.option("--import", "imports", multiple=True, metavar="MODULE_OR_FILE", help=IMPORT_HELP)

mcp_config_option = click.option(
    "--mcp-config", "mcp_config", type=click.Path(dir_okay=False), metavar="FILE", envvar="GORMES_MCP_CONFIG",
    help="External MCP servers whose tools become operations mcp.<server>.<tool> (a JSON file in "
    "Claude Desktop's mcpServers shape, or TOML; env GORMES_MCP_CONFIG; see docs/tools.md).")


def warn(line: str) -> None:
    """One `gormes: warning:` line on stderr (a server that did not start, say)."""
    click.echo(f"gormes: warning: {line}", err=True)
