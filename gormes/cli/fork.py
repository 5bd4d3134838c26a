"""`gormes fork RUN --at POSITION [--model M] [--set KEY=VALUE]... [--reply FILE |
--tool-result JSON | --tool-error TEXT] [--yes]`: a new run with RUN's events up to
POSITION copied (`forked_from` recorded), continuing live.

One operation (run.fork in gormes/tools/run_admin.py), run as the operator through
the audited executor (decision 0019), its options derived from the operation's
input type (gormes/cli/derive.py). `--set KEY=VALUE` is a short way to give
entries of `--overrides`. `--reply FILE` reads the file here (JSON in the recorded
reply's shape when it starts with `{`, else a text-only reply, see
gormes/actors/runs/fork_replace.py); the operation replaces the observation at
POSITION with it (decision 0034). Without `--yes`, a fork whose live part may call
mutating, non-idempotent operations is refused (audited) and they are listed:
exit 2, nothing forked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import msgspec

from gormes.actors.runs.fork_replace import ForkUnconfirmed
from gormes.cli.derive import OperatorCall, Shown, operation_command, spec_named
from gormes.cli.foreground import (
    drive_runs,
    exit_code,
    import_option,
    mcp_config_option,
    model_retries_option,
    model_timeout_option,
    start_and_wait,
    workspace_option,
)
from gormes.errors import UserError
from gormes.events.catalog import load_all
from gormes.events.open import require_database
from gormes.tools import run_admin
from gormes.tools.imports import load_imports


def parse_setting(text: str) -> tuple[str, Any]:
    """KEY=VALUE; VALUE is JSON when it parses as JSON, else the text itself."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set wants KEY=VALUE, got {text!r}")
    try:
        return key.strip(), msgspec.json.decode(value.encode())
    except msgspec.DecodeError:
        return key.strip(), value


class ReplyFile(click.ParamType):
    """`--reply FILE`: the file's text, as JSON when it starts with `{`, else as text."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            text = Path(value).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"--reply {value}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
        if not text.lstrip().startswith("{"):
            return text.removesuffix("\n").removesuffix("\r")  # a file's final newline is not the reply's
        try:
            return msgspec.json.decode(text.encode())
        except msgspec.DecodeError as exc:
            raise UserError(f"--reply {value}: starts with {{ but is not JSON ({exc})") from None


FORK = {
    "run_id": Shown(metavar="RUN"),
    "at": Shown(metavar="POSITION",
                help="The last log position of RUN to copy (as `gormes replay` and `gormes events` print)."),
    "model": Shown(metavar="SPEC", help="Continue with this model: scripted:PATH, openai:MODEL or anthropic:MODEL."),
    "overrides": Shown(metavar="JSON", help="Keys of the run's input to override, as one JSON object."),
    "reply": Shown(metavar="FILE", type=ReplyFile(),
                   help="Replace the model reply at POSITION with this one: JSON in the recorded reply's shape "
                   '({"content": ..., "tool_calls": [{"name": ..., "arguments": {...}}]}), or plain text.'),
    "tool_result": Shown(metavar="JSON", help="Replace the tool call's outcome at POSITION with this result."),
    "tool_error": Shown(metavar="TEXT", help="Replace the tool call's outcome at POSITION with this error."),
    "yes": Shown(help="Fork even if the live part may call mutating, non-idempotent operations "
                 "(without it they are listed and nothing is forked)."),
}


@operation_command(None, "fork", spec_named(run_admin.SPECS, "run.fork"), arguments=("run_id",), shown=FORK)
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Override a key of the run's input (VALUE as JSON, else text); repeatable.")
@workspace_option
@import_option
@mcp_config_option
@model_timeout_option
@model_retries_option
@click.option("--json", "as_json", is_flag=True, help="Print the new run as JSON.")
def fork(call: OperatorCall, settings: tuple[str, ...], workspace: str | None, imports: tuple[str, ...],
         mcp_config: str | None, model_timeout: float | None, model_retries: int | None, as_json: bool) -> int:
    """Fork RUN at POSITION: copy its events up to there into a new run and continue it live.

    The code is first replayed against RUN up to POSITION; if it no longer
    matches, nothing is written but the refusal's audit record. The fork is
    audited (operation run.fork, as the operator); the new run keeps RUN's trust
    class and memory scope.
    """
    load_all()
    load_imports(imports)
    value = call.value
    if settings:
        value = msgspec.structs.replace(value, overrides={**value.overrides, **dict(map(parse_setting, settings))})
    target = call.obj.target
    require_database(target)  # the run to fork is read first: a missing database is not made

    try:
        forked, signals = drive_runs(target, workspace, lambda door: start_and_wait(door, call.spec.name, value),
                                     mcp_config=mcp_config, model_timeout=model_timeout,
                                     model_retries=model_retries)
    except (ForkUnconfirmed, BaseExceptionGroup) as exc:
        unconfirmed = unconfirmed_in(exc)
        if unconfirmed is None:
            raise
        return echo_unconfirmed(unconfirmed, as_json)
    outcome = forked.outcome
    if as_json:
        click.echo(msgspec.json.encode(forked).decode())
    else:
        click.echo(
            f"forked run {forked.run_id} from run {value.run_id} at position {value.at} "
            f"({forked.copied} events copied): {outcome.status}"
            + (f": {outcome.error}" if outcome.error else "")
        )
        if outcome.status == "completed":
            result = outcome.result
            click.echo(result if isinstance(result, str) else msgspec.json.encode(result).decode())
    return exit_code(outcome, signals)


def unconfirmed_in(exc: BaseException) -> ForkUnconfirmed | None:
    """The ForkUnconfirmed `exc` is, or the one a group of one holds."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, ForkUnconfirmed) else None


def echo_unconfirmed(refused: ForkUnconfirmed, as_json: bool, what: str = "forked") -> int:
    """The operations a fork's live part may call that cannot be undone, and exit 2:
    on stdout as JSON (`{"forked": false, "needs_yes": [...]}`) or a line each, and
    one error line on stderr."""
    if as_json:
        click.echo(msgspec.json.encode({"forked": False, "needs_yes": refused.operations}).decode())
    else:
        click.echo("the live part may call these mutating, non-idempotent operations:")
        for risk in refused.operations:
            click.echo(f"  {risk.name}  {risk.description}")
        click.echo(f"gormes: error: nothing {what}: give --yes to go on anyway", err=True)
    return 2
