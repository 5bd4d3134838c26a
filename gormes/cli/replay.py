"""`gormes replay RUN` and `gormes replay --file run.jsonl`: rerun a recorded run's
handler against its recording, with no side effects."""

from __future__ import annotations

from typing import Any

import click
import msgspec

from gormes.cli.imports import import_option


@click.command()
@click.argument("run_id", required=False, metavar="RUN")
@click.option("--file", "file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Replay from a JSONL file (`gormes export RUN --children`, or an archived segment of "
              "`gormes retain`, gzip); no database needed. "
              "RUN defaults to the file's top run.")
@click.option("--until", type=click.IntRange(min=0), metavar="POSITION",
              help="Stop serving after this log position and print the run's state there.")
@click.option("--no-children", is_flag=True,
              help="Serve subagents' recorded outcomes instead of replaying their runs.")
@import_option
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object: exact, events, divergence (with its diff), handler_version_changed, children, ...")
@click.pass_obj
def replay(obj: Any, run_id: str | None, file: str | None, until: int | None, no_children: bool,
           imports: tuple[str, ...], as_json: bool) -> int:
    """Replay RUN exactly: the same handler code against the recorded events.

    Prints `exact: N events reproduced` (exit 0) or the first divergence: the
    log position, what was recorded and what the code asked for, then what
    differs: a model request's message and field, the tools offered, a tool
    call's arguments (exit 1).
    """
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import trio

    from gormes.actors.runs.recorded import DatabaseRuns, FileRuns
    from gormes.actors.runs.replay import replay as replay_run
    from gormes.errors import UserError
    from gormes.tools.builtin import default_registry
    from gormes.tools.imports import load_imports

    load_imports(imports)
    if file is not None:
        source: Any = FileRuns(file)
        run_id = run_id or source.root_run_id()
    else:
        if run_id is None:
            raise UserError("give the RUN to replay (or --file FILE)")
        source = DatabaseRuns(obj.target)
    try:
        # The built-in and imported operations: the tool schemas the recorded runs were offered.
        report = trio.run(lambda: replay_run(source, run_id, registry=default_registry(),
                                             children=not no_children, until=until))
    finally:
        if isinstance(source, DatabaseRuns):
            source.close()
    if as_json:
        click.echo(msgspec.json.encode(summary(report)).decode())
    else:
        print_report(report)
    return 0 if report.tree_exact else 1


def summary(report: Any) -> dict[str, Any]:
    divergence = report.first_divergence
    return {
        "exact": report.tree_exact,
        "events": report.total_events,
        "divergence": None if divergence is None else msgspec.to_builtins(divergence),
        "handler_version_changed": any(r.handler_version_changed for r in report.walk()),
        "run_id": report.run_id,
        "status": report.status,
        "state": None if report.state is None else msgspec.to_builtins(report.state),
        "notes": report.notes,
        "children": [msgspec.to_builtins(c) for c in report.children],
    }


def print_report(report: Any) -> None:
    for run in report.walk():
        for note in run.notes:
            click.echo(f"{'warning' if run.handler_version_changed and 'changed' in note else 'note'}: {note}")
    for run in report.walk():
        if run.state is not None:
            print_state(run.state)
    divergence = report.first_divergence
    if divergence is not None:
        where = f"seq {divergence.seq}" if divergence.seq is not None else "the run's end"
        in_child = "" if divergence.run_id == report.run_id else f" in child run {divergence.run_id}"
        click.echo(
            f"divergence at position {divergence.position} ({where}){in_child}: "
            f"recorded {divergence.recorded}, code asked {divergence.asked}"
        )
        for line in divergence.diff_lines():
            click.echo(f"  {line}")
        return
    if not report.tree_exact:  # stopped at a redacted event: the note above says where
        click.echo(f"not exact: {report.total_events} events reproduced, then a redacted event")
        return
    upto = f" up to position {report.state.position}" if report.state is not None else ""
    click.echo(f"exact{upto}: {report.total_events} events reproduced")


def print_state(state: Any) -> None:
    t = state.tokens
    click.echo(
        f"run {state.run_id} at position {state.position} (seq {state.seq}): "
        f"{state.iterations} model turns, tokens {t.input} in / {t.output} out, "
        f"{len(state.messages)} messages, {len(state.children)} children"
    )
    for message in state.messages:
        text = " ".join(str(message.get("content", "")).split())
        calls = message.get("tool_calls") or []
        if calls:
            text += " " + ", ".join(f"-> {c['name']}({c['arguments']})" for c in calls)
        click.echo(f"  {message.get('role')}: {text[:160]}")
