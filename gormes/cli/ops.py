"""`gormes ops ...`: the operation registry seen from the command line.

`list` shows every operation with its trust classes and limits; `schema` prints
the model tool schemas a trust class would be given (always JSON); `call` runs
one operation as the operator through the same audited executor that agents use.
Each takes `--import MODULE_OR_FILE` to see users' operations (`@gormes.operation`)
beside the built-ins, and `--mcp-config FILE` for the tools of external MCP servers
(`mcp.<server>.<tool>`: the servers are started to list or call them).

`operator_session` and `operator_call` are that door for every other command
that changes state (`jobs cancel`, `cron add`, `memory forget`, `skills
promote`, ...): each call is checked, validated and audited as
`Caller(trust="operator", id="cli")` (decision 0019). Those commands import this
module only when they run one, so the executor and the registry it loads are not
paid for by a quick read. A command that is exactly one operation gets its
options and its input from gormes/cli/derive.py. The commands that drive
runs in the foreground (`run`, `fork`, `runs resume`) open theirs with
`operator_door` beside their RunManager (gormes/cli/foreground.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import traceback

import click
import trio

from gormes.actors.jobs.queue import JobQueue
from gormes.cli.imports import import_option, mcp_config_option, warn
from gormes.errors import GormesError
from gormes.events.open import open_store
from gormes.ops.declared import declared
from gormes.ops.executor import Executor
from gormes.ops.registry import Registry
from gormes.ops.spec import TRUST_CLASSES, Caller
from gormes.tools.builtin import default_registry
from gormes.tools.imports import load_imports
from gormes.tools.sources import operation_registry

if TYPE_CHECKING:
    from gormes.events.store import EventStore
    from gormes.tools.run_admin import RunStarter

T = TypeVar("T")

CLI_CALLER_ID = "cli"


class OperatorDoor:
    """The executor, store and job queue one CLI command works through (a
    foreground run's command has no queue, and its runs: `executor.runs`)."""

    def __init__(self, executor: Executor, queue: JobQueue | None) -> None:
        self.executor = executor
        self.queue = queue
        self.store = executor.store

    async def call(self, name: str, value: Any) -> Any:
        """Run operation `name` as the operator; its typed output."""
        return await self.executor.call(name, value, Caller(trust="operator", id=CLI_CALLER_ID))

    async def refuse(self, name: str, value: Any, exc: Exception) -> None:
        """Audit a call of `name` the command refused before making it (outcome
        invalid: what was asked cannot be done as asked)."""
        await self.executor.refuse(name, value, Caller(trust="operator", id=CLI_CALLER_ID), str(exc),
                                   outcome="invalid", error_type=type(exc).__name__)


def operator_session(
    obj: Any, work: Callable[[OperatorDoor], Awaitable[T]], *, workspace: Path | str | None = None,
    jobs: bool = True, progress: Callable[[str, int, int], None] | None = None, mcp_config: str | None = None,
    create: bool = True,
) -> T:
    """Open the store (an SQLite path or a PostgreSQL URL) and its job queue, run
    `work(door)` in trio, close both. `workspace`: the fs operations' root; `jobs`
    False opens no queue (which sets up the ledger: not for a log write alone, so
    that a read-only database is refused by the write itself). `progress`: where a
    long operation reports how far it is (the command's bar). `mcp_config`: the
    external MCP servers whose tools the door may call too (started for the session).
    `create` False: a database that is not there is an error, not made (a read)."""
    async def main() -> T:
        async with (open_store(obj.target, create=create) as store,
                    operation_registry(store, mcp_config, warn=warn) as registry):
            queue = await JobQueue.open(store) if jobs else None
            return await work(operator_door(store, queue, workspace=workspace, progress=progress,
                                            registry=registry))

    return trio.run(main)


def operator_door(
    store: EventStore, queue: JobQueue | None = None, *, workspace: Path | str | None = None,
    runs: RunStarter | None = None, progress: Callable[[str, int, int], None] | None = None,
    registry: Registry | None = None,
) -> OperatorDoor:
    """The operator's door on an open store: `queue` (None: the job operations are
    off), `workspace` (the fs operations' root), `runs` (None: the run operations
    are off) and `registry` (None: `default_registry()`)."""
    executor = Executor(registry or default_registry(), store, workspace=workspace, jobs=queue, runs=runs,
                        progress=progress)
    return OperatorDoor(executor, queue)


def operator_call(
    obj: Any, name: str, value: Any, *, workspace: Path | str | None = None, jobs: bool = True,
    progress: Callable[[str, int, int], None] | None = None, mcp_config: str | None = None,
    create: bool = True,
) -> Any:
    """One operation as the operator, through the audited executor; its typed output.
    `create` False: a database that is not there is an error (a read's command)."""
    return operator_session(obj, lambda door: door.call(name, value), workspace=workspace, jobs=jobs,
                            progress=progress, mcp_config=mcp_config, create=create)


def listed_registry(mcp_config: str | None) -> Registry:
    """The operations to list: `default_registry()`, and with `mcp_config` the MCP
    servers' tools too (the servers are started to list them, then stopped)."""
    if mcp_config is None:
        return default_registry()

    async def listed() -> Registry:
        async with operation_registry(None, mcp_config, warn=warn) as registry:
            return Registry(registry.list())

    return trio.run(listed)


@click.group()
def ops() -> None:
    """List the operations, print their tool schemas, call one as the operator."""


@ops.command("list")
@click.option("--trust", type=click.Choice(TRUST_CLASSES), help="Only operations this trust class may call.")
@click.option("--prompt-visible", is_flag=True, help="Only operations a model may be offered.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array instead of a table.")
@import_option
@mcp_config_option
def list_(trust: str | None, prompt_visible: bool, as_json: bool, imports: tuple[str, ...],
          mcp_config: str | None) -> None:
    """List the registered operations: the built-ins, those --import declares and
    the tools of the MCP servers --mcp-config names."""
    import msgspec

    load_imports(imports)
    specs = listed_registry(mcp_config).list(trust=trust, prompt_visible=True if prompt_visible else None)
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
@import_option
@mcp_config_option
def schema(trust: str, as_json: bool, imports: tuple[str, ...], mcp_config: str | None) -> None:
    """Print the model tool schemas a trust class would be given (JSON)."""
    import msgspec

    load_imports(imports)
    tools = listed_registry(mcp_config).tool_schemas(trust)
    click.echo(msgspec.json.format(msgspec.json.encode(tools), indent=2).decode())


@ops.command()
@click.argument("name")
@click.argument("input_json", default="{}", metavar="[INPUT]")
@click.option("--workspace", type=click.Path(file_okay=False, exists=True), envvar="GORMES_WORKSPACE",
              default=".", show_default=True, help="Root for the fs operations (env GORMES_WORKSPACE).")
@import_option
@mcp_config_option
@click.pass_obj
def call(obj: Any, name: str, input_json: str, workspace: str, imports: tuple[str, ...],
         mcp_config: str | None) -> None:
    """Run operation NAME with INPUT (a JSON object) as the operator; print its JSON output.

    The call is audited like any other (an audit.operation event). A user's
    operation that raises is one error line (the operation, the error, where it
    was raised) and exit 1; the call is audited as an error. A call writes its
    audit record, so it makes the database when there is none, except a call of
    an operation made from what the log holds (`needs_database`: memory.recall,
    memory.mirror), which says `no gormes database at ...` as every read does
    (decision 0089's addendum)."""
    import msgspec

    load_imports(imports)
    spec = default_registry().get(name)  # None: an external MCP tool, known once its server runs
    create = spec is None or not spec.needs_database
    try:
        output = operator_call(obj, name, input_json, workspace=workspace, mcp_config=mcp_config, create=create)
    except Exception as exc:
        failed = user_operation_failure(name, exc)
        if failed is None:
            raise
        raise OperationFailed(failed) from None
    click.echo(msgspec.json.format(msgspec.json.encode(output)).decode())


class OperationFailed(GormesError):
    """A user's operation raised: the call failed (audited as an error), gormes did not."""

    exit_code = 1


def user_operation_failure(name: str, exc: BaseException) -> str | None:
    """One line for an error a user's operation (`@gormes.operation`) raised from
    its own function, None for anything else: an error of gormes's own is already
    one line, and any other is a bug of gormes's and keeps its traceback (decision
    0090). The line names the operation, the error and where it was raised, as the
    traceback's last line and last frame would."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    found = declared.snapshot().get(name)
    if found is None or isinstance(exc, GormesError) or not isinstance(exc, Exception):
        return None
    code = getattr(found.spec.handler, "__code__", None)
    frames = list(traceback.walk_tb(exc.__traceback__))
    if code is None or not any(frame.f_code is code for frame, _ in frames):
        return None
    frame, line = frames[-1]
    text = " ".join(str(exc).split())
    kind = type(exc).__name__
    return (f"operation {name} failed: {kind}{': ' + text if text else ''} "
            f"(raised at {frame.f_code.co_filename}:{line})")
