"""`gormes approve ID --reason`, `gormes deny ID --reason`, `gormes approvals list`:
the operator's side of the approval gates (decision 0033).

Each is one operation run through the audited executor (gormes/tools/approvals.py),
its options derived from the operation's input: an unknown id or a request that is
not pending (already decided, timed out) is one `gormes: error:` line, exit 2, and
nothing is written.

    gormes approvals list                       # pending requests, newest first
    gormes approvals list --status all --json
    gormes approve 01J... --reason "checked the command"
    gormes deny 01J... --reason "not on production"
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import click
import msgspec

from gormes.cli.derive import OperatorCall, operation_command, spec_named
from gormes.tools import approvals as approval_ops

json_option = click.option("--json", "as_json", is_flag=True, help="Print the request as JSON.")


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def describe(v: Any) -> list[str]:
    lines = [f"approval {v.id}: {v.status}", f"  {v.operation} {v.arguments}", f"  why: {v.why}",
             f"  asked by {v.caller} ({v.trust})" + (f", run {v.run_id}" if v.run_id else "")
             + (f", job {v.job_id}" if v.job_id else ""),
             f"  requested {_when(v.requested_at)}; on timeout ({_when(v.expires_at)}): {v.on_timeout}"]
    if v.decided_by is not None:
        lines.append(f"  {v.status} by {v.decided_by} at {_when(v.decided_at)}: {v.reason or '(no reason)'}")
    if v.used_by is not None:
        lines.append(f"  served the call of run {v.used_by}")
    if v.resumed_job:
        lines.append(f"  resumed job {v.resumed_job}")
    return lines


def _print(value: Any, as_json: bool) -> None:
    if as_json:
        click.echo(msgspec.json.encode(value).decode())
    else:
        click.echo("\n".join(describe(value)))


@operation_command(None, "approve", spec_named(approval_ops.SPECS, "approval.approve"), arguments=("id",))
@json_option
def approve(call: OperatorCall, as_json: bool) -> None:
    """Approve pending request ID: the run's call goes on (its parked job resumes)."""
    _print(call.run(), as_json)


@operation_command(None, "deny", spec_named(approval_ops.SPECS, "approval.deny"), arguments=("id",))
@json_option
def deny(call: OperatorCall, as_json: bool) -> None:
    """Deny pending request ID: the run's call fails as a denied tool call."""
    _print(call.run(), as_json)


@click.group()
def approvals() -> None:
    """Approval requests: calls of operations that wait for a person."""


@operation_command(approvals, "list", spec_named(approval_ops.SPECS, "approval.list"))
@click.option("--json", "as_json", is_flag=True, help="One JSON object {approvals: [...]}.")
def list_(call: OperatorCall, as_json: bool) -> None:
    """Approval requests, newest first (pending by default)."""
    listed = call.run()
    if as_json:
        click.echo(msgspec.json.encode(listed).decode())
        return
    if not listed.approvals:
        click.echo("no approval requests")
        return
    from gormes.cli.output import print_rows_table

    print_rows_table(
        ("ID", "STATUS", "OPERATION", "RUN", "JOB", "REQUESTED", "EXPIRES", "DECIDED BY"),
        [(v.id, v.status, v.operation, v.run_id or "-", v.job_id or "-", _when(v.requested_at), _when(v.expires_at),
          v.decided_by or "-") for v in listed.approvals],
    )
