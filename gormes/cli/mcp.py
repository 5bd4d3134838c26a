"""`gormes mcp [--trust CLASS] [--workspace DIR] [--import MODULE_OR_FILE]...`: serve the
operations (the built-ins and those --import declares) over MCP (stdio).

Standard output belongs to the protocol; nothing else is printed there. A bad
`GORMES_GATEWAY_RATE` or `GORMES_GATEWAY_CLIENT_RATE` is refused before the
database is opened.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from gormes.cli.imports import import_option, mcp_config_option
from gormes.ops.spec import TRUST_CLASSES


@click.command("mcp")
@click.option("--trust", type=click.Choice(TRUST_CLASSES), default="gateway", show_default=True,
              envvar="GORMES_MCP_TRUST",
              help="The trust class every MCP caller gets (env GORMES_MCP_TRUST). "
              "Operator-only operations are never served, but for `operator`: the approval "
              "and budget operations an operator's client may use (decision 0037).")
@click.option("--workspace", type=click.Path(file_okay=False, exists=True), envvar="GORMES_WORKSPACE",
              help="Root of the fs tools (env GORMES_WORKSPACE); without it they are unavailable.")
@import_option
@mcp_config_option
@click.pass_obj
def mcp(obj: Any, trust: str, workspace: str | None, imports: tuple[str, ...], mcp_config: str | None) -> None:
    """Serve the prompt-visible operations as MCP tools over stdin/stdout."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import anyio

    from gormes.control.call_rate import call_rate_from_env, client_share_from_env
    from gormes.events.open import open_store
    from gormes.mcp_server import serve_stdio
    from gormes.cli.imports import warn
    from gormes.tools.imports import load_imports
    from gormes.tools.sources import operation_registry

    call_rate = call_rate_from_env(os.environ)  # the gateways' (decision 0072): a bad value, one line, exit 2
    client_rate = client_share_from_env(os.environ, call_rate)  # each client's share of it (decision 0082)
    load_imports(imports)

    async def main() -> None:
        async with open_store(obj.target) as store, operation_registry(store, mcp_config, warn=warn) as registry:
            await serve_stdio(
                store, registry=registry, trust=trust,
                workspace=Path(workspace) if workspace else None, warn=warn, call_rate=call_rate,
                client_rate=client_rate,
            )

    anyio.run(main, backend="trio")
