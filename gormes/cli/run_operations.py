"""`gormes run` and `gormes runs send|resume`: each one run operation (run.start
and run.resume in gormes/tools/run_admin.py, run.send in gormes/tools/runs.py),
run as the operator through the audited executor (decision 0019), its options
derived from the operation's input type (gormes/cli/derive.py).

`run` and `runs resume` drive their run in the foreground and wait for its end
(gormes/cli/foreground.py: SIGINT and SIGTERM cancel it); `run`'s `--prompt` and
`--system` are a short way to give the agent's input, `--input JSON` the long one.
`runs send` puts a message in a running run's inbox, wherever the run runs: the
agent reads it at its next turn.

This module is imported when one of its commands is asked for
(gormes/cli/lazy_group.py): it loads the executor, which `runs list` skips.
"""

from __future__ import annotations

import os
import sys

import click
import msgspec

from gormes.cli.derive import OperatorCall, Shown, operation_command, spec_named
from gormes.cli.foreground import (
    drive_runs,
    echo_outcome,
    exit_code,
    import_option,
    mcp_config_option,
    model_retries_option,
    model_timeout_option,
    start_and_wait,
    workspace_option,
)
from gormes.cli.runs import emit_json, runs
from gormes.errors import UserError
from gormes.tools import run_admin
from gormes.tools import runs as run_ops
from gormes.tools.imports import load_imports

REQUIRE_ENV = "GORMES_REQUIRE_APPROVAL"  # the runs' approval gate reads it (gormes/actors/runs/approvals.py)

RUN = {
    "handler": Shown(metavar="HANDLER"),
    "input": Shown(metavar="JSON", help="The handler's input as JSON (instead of --prompt)."),
    "model": Shown(metavar="SPEC", help="scripted:PATH (a script, not a model), openai:MODEL or anthropic:MODEL."),
    "tools": Shown(metavar="A,B", split=",", help="The tools it may use; default: every prompt-visible tool."),
    "max_iterations": Shown(metavar="N", help="Model turns before giving up."),
    "deadline_s": Shown(metavar="SECONDS", aliases=("--deadline",), help="Give up after this long."),
}


@operation_command(None, "run", spec_named(run_admin.SPECS, "run.start"), arguments=("handler",), shown=RUN)
@click.option("--prompt", help="The agent's task (input {\"prompt\": TEXT}).")
@click.option("--system", help="The agent's system prompt (with --prompt).")
@workspace_option
@import_option
@mcp_config_option
@model_timeout_option
@model_retries_option
@click.option("--require-approval", "require_approval", multiple=True, metavar="PATTERN",
              help="An operation (or fnmatch pattern: payments.*) whose calls wait for `gormes approve`, "
                   "besides GORMES_REQUIRE_APPROVAL's; repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def run(call: OperatorCall, prompt: str | None, system: str | None, workspace: str | None,
        imports: tuple[str, ...], mcp_config: str | None, model_timeout: float | None, model_retries: int | None,
        require_approval: tuple[str, ...], as_json: bool) -> None:
    """Start a run of HANDLER ("agent" for the built-in agent loop, or one that
    --import declares) and wait for it.

    The start is audited (operation run.start, as the operator). A call that needs
    approval waits here until `gormes approve|deny ID` (from another shell)."""
    if require_approval:  # read by the runs' approval gate (gormes/actors/runs/approvals.py)
        os.environ[REQUIRE_ENV] = ",".join(p for p in (os.environ.get(REQUIRE_ENV, ""), *require_approval) if p)
    load_imports(imports)
    value = call.value
    if value.input is None:
        if prompt is None:
            raise UserError("give the run's input: --prompt TEXT or --input JSON")
        value = msgspec.structs.replace(value, input={"prompt": prompt, **({"system": system} if system else {})})

    def started(run_id: str) -> None:
        if not as_json:
            click.echo(f"run {run_id} started")

    outcome, signals = drive_runs(
        call.obj.target, workspace, lambda door: start_and_wait(door, call.spec.name, value, started),
        mcp_config=mcp_config, model_timeout=model_timeout, model_retries=model_retries)
    if as_json:
        emit_json(outcome)
    else:
        echo_outcome(f"run {outcome.run_id}", outcome)
    sys.exit(exit_code(outcome, signals))


@operation_command(runs, "send", spec_named(run_ops.SPECS, "run.send"), arguments=("run_id",), shown={
    "run_id": Shown(metavar="RUN"), "payload": Shown(metavar="JSON", help="The message (JSON)."),
})
@click.option("--json", "as_json", is_flag=True, help="Print the message sent as JSON.")
def send(call: OperatorCall, as_json: bool) -> None:
    """Send an operator message to RUN's inbox (a running run: the agent reads it
    at its next turn); prints the message id.

    The send is audited (operation run.send, as the operator)."""
    sent = call.run(jobs=False)  # the run's inbox is in the log: no job queue is opened
    emit_json(sent) if as_json else click.echo(sent.message_id)


@operation_command(runs, "resume", spec_named(run_admin.SPECS, "run.resume"), arguments=("run_id",), shown={
    "run_id": Shown(metavar="RUN"),
    "force": Shown(help="RUN has no end and its process, which cannot be checked from here (another host or "
                   "container), is gone: record it as cut off, then resume it. On its own host a gone "
                   "process is seen without it."),
})
@workspace_option
@import_option
@mcp_config_option
@model_timeout_option
@model_retries_option
@click.option("--json", "as_json", is_flag=True, help="Print the new run as JSON.")
def resume(call: OperatorCall, workspace: str | None, imports: tuple[str, ...], mcp_config: str | None,
           model_timeout: float | None, model_retries: int | None, as_json: bool) -> None:
    """Continue RUN, an interrupted run (not a job's: the job resumes those), as a new
    run with `resumed_from`: its recorded steps are replayed, not redone, then it goes live.

    The resume is audited (operation run.resume, as the operator); the new run keeps
    RUN's trust class and memory scope."""
    load_imports(imports)
    run_id = call.value.run_id

    def started(new_run_id: str) -> None:
        if not as_json:
            click.echo(f"run {new_run_id} started: resumes run {run_id}")

    resumed, signals = drive_runs(
        call.obj.target, workspace, lambda door: start_and_wait(door, call.spec.name, call.value, started),
        mcp_config=mcp_config, model_timeout=model_timeout, model_retries=model_retries)
    if as_json:
        emit_json(resumed)
    else:
        echo_outcome(f"run {resumed.run_id} (resumes run {run_id}, {resumed.copied} recorded observations "
                     "replayed)", resumed.outcome)
    sys.exit(exit_code(resumed.outcome, signals))
