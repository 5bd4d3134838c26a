"""`gormes fork RUN --at POSITION [--model M] [--set KEY=VALUE]...`: a new run with
RUN's events up to POSITION copied (`forked_from` recorded), continuing live."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import msgspec

from gormes.cli.foreground import drive_runs, exit_code, import_option, start_and_wait, workspace_option
from gormes.errors import UserError


def parse_setting(text: str) -> tuple[str, Any]:
    """KEY=VALUE; VALUE is JSON when it parses as JSON, else the text itself."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set wants KEY=VALUE, got {text!r}")
    try:
        return key.strip(), msgspec.json.decode(value.encode())
    except msgspec.DecodeError:
        return key.strip(), value


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--at", "at", type=click.IntRange(min=1), required=True, metavar="POSITION",
              help="The last log position of RUN to copy (as `gormes replay` and `gormes events` print).")
@click.option("--model", metavar="SPEC", help="Continue with this model: scripted:PATH or openai:MODEL.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Override a key of the run's input (VALUE as JSON, else text); repeatable.")
@workspace_option
@import_option
@click.option("--json", "as_json", is_flag=True, help="Print the new run as JSON.")
@click.pass_obj
def fork(obj: Any, run_id: str, at: int, model: str | None, settings: tuple[str, ...],
         workspace: str | None, imports: tuple[str, ...], as_json: bool) -> int:
    """Fork RUN at POSITION: copy its events up to there into a new run and continue it live.

    The code is first replayed against RUN up to POSITION; if it no longer
    matches, nothing is written but the refusal's audit record. The fork is
    audited (operation run.fork, as the operator); the new run keeps RUN's trust
    class and memory scope.
    """
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.cli.replay import load_handlers
    from gormes.events.catalog import load_all
    from gormes.events.open import is_postgres_url

    load_all()
    load_handlers(imports)
    overrides = dict(parse_setting(s) for s in settings)
    if not is_postgres_url(obj.target) and not Path(obj.target).exists():
        raise UserError(f"no database at {obj.target}")

    value = {"run_id": run_id, "at": at, "model": model, "overrides": overrides}
    forked, signals = drive_runs(obj.target, workspace, lambda door: start_and_wait(door, "run.fork", value))
    outcome = forked.outcome
    if as_json:
        click.echo(msgspec.json.encode(forked).decode())
    else:
        click.echo(
            f"forked run {forked.run_id} from run {run_id} at position {at} "
            f"({forked.copied} events copied): {outcome.status}"
            + (f": {outcome.error}" if outcome.error else "")
        )
        if outcome.status == "completed":
            result = outcome.result
            click.echo(result if isinstance(result, str) else msgspec.json.encode(result).decode())
    return exit_code(outcome, signals)
