"""`gormes ops ...`: the operation registry seen from the command line.

`list` shows every operation with its trust classes and limits; `schema` prints
the model tool schemas a trust class would be given (always JSON); `call` runs
one operation as the operator through the same audited executor that agents use.
"""

from __future__ import annotations

from typing import Any

import click

from gormes.ops.spec import TRUST_CLASSES


@click.group()
def ops() -> None:
    """List the operations, print their tool schemas, call one as the operator."""


@ops.command("list")
@click.option("--trust", type=click.Choice(TRUST_CLASSES), help="Only operations this trust class may call.")
@click.option("--prompt-visible", is_flag=True, help="Only operations a model may be offered.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array instead of a table.")
def list_(trust: str | None, prompt_visible: bool, as_json: bool) -> None:
    """List the registered operations."""
    import msgspec

    from gormes.ops.builtin import default_registry

    specs = default_registry().list(trust=trust, prompt_visible=True if prompt_visible else None)
    infos = [spec.info() for spec in specs]
    if as_json:
        click.echo(msgspec.json.encode(infos).decode())
        return
    _print_table(infos)


def _print_table(infos: list[Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    table = Table(show_edge=False, header_style="bold")
    table.add_column("name", no_wrap=True)
    table.add_column("trust")
    for column in ("mutating", "idempotent", "prompt-visible"):
        table.add_column(column)
    table.add_column("timeout", justify="right")
    table.add_column("audit kind", no_wrap=True)
    for info in infos:
        table.add_row(
            info.name, "all" if len(info.trust) == len(TRUST_CLASSES) else ", ".join(info.trust), yes(info.mutating), yes(info.idempotent),
            yes(info.prompt_visible), f"{info.timeout:g}s", info.audit_kind,
        )
    Console(soft_wrap=True).print(table)


@ops.command()
@click.option("--trust", type=click.Choice(TRUST_CLASSES), required=True,
              help="The trust class whose tools to print.")
@click.option("--json", "as_json", is_flag=True, help="Accepted for consistency: the output is always JSON.")
def schema(trust: str, as_json: bool) -> None:
    """Print the model tool schemas a trust class would be given (JSON)."""
    import msgspec

    from gormes.ops.builtin import default_registry

    tools = default_registry().tool_schemas(trust)
    click.echo(msgspec.json.format(msgspec.json.encode(tools), indent=2).decode())


@ops.command()
@click.argument("name")
@click.argument("input_json", default="{}", metavar="[INPUT]")
@click.option("--workspace", type=click.Path(file_okay=False, exists=True), envvar="GORMES_WORKSPACE",
              default=".", show_default=True, help="Root for the fs operations (env GORMES_WORKSPACE).")
@click.pass_obj
def call(obj: Any, name: str, input_json: str, workspace: str) -> None:
    """Run operation NAME with INPUT (a JSON object) as the operator; print its JSON output.

    The call is audited like any other (an audit.operation event)."""
    import msgspec
    import trio

    from gormes.actors.queue import JobQueue
    from gormes.events.open import open_store
    from gormes.ops.builtin import default_registry
    from gormes.ops.executor import Executor
    from gormes.ops.spec import Caller

    async def main() -> bytes:
        async with open_store(obj.target) as store:
            executor = Executor(default_registry(), store, workspace=workspace, jobs=await JobQueue.open(store))
            return await executor.call_json(name, input_json, Caller(trust="operator", id="cli"))

    click.echo(msgspec.json.format(trio.run(main)).decode())
