"""`gormes doctor [--json] [--offline] [--full] [--import MODULE]... [--mcp-config FILE]`: every health check,
one line each; exit 1 when any check fails (warnings exit 0)."""

from __future__ import annotations

import sys
from typing import Any

import click

from gormes.cli.imports import import_option, mcp_config_option

MARKS = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (with schema_version).")
@click.option("--offline", is_flag=True,
              help="Skip the checks that need a running daemon (worker heartbeats, wedged "
              "queues, projection lag).")
@click.option("--full", is_flag=True,
              help="Scan the whole log and file (PRAGMA quick_check, every audit day) instead of "
              "what was appended since the last doctor run.")
@import_option
@mcp_config_option
@click.pass_obj
def doctor(obj: Any, as_json: bool, offline: bool, full: bool, imports: tuple[str, ...],
           mcp_config: str | None) -> None:
    """Check the database, projections, queue, workers, operations, replay and disk."""
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    import msgspec

    from gormes.doctor import exit_code, run_doctor
    from gormes.tools.imports import load_imports

    # Its operations are checked with the built-ins; runs recorded with its run
    # handlers count as replayable.
    load_imports(imports)
    # Each configured MCP server is started and listed (a warning when it cannot be).
    report = run_doctor(obj.target, offline=offline, mcp_config=mcp_config, full=full)
    if as_json:
        sys.stdout.buffer.write(msgspec.json.encode(report) + b"\n")
        sys.stdout.flush()
    else:
        _print_human(report)
    click.get_current_context().exit(exit_code(report))


def _print_human(report: Any) -> None:
    width = max(len(c.name) for c in report.checks)
    for c in report.checks:
        click.echo(f"{MARKS[c.status]}  {c.name:<{width}}  {c.message}")
        if c.remediation:
            click.echo(f"      {'':<{width}}  -> {c.remediation}")
    for s in report.skipped:
        click.echo(f"skip  {s.name:<{width}}  {s.reason}")
    warns = sum(c.status == "warn" for c in report.checks)
    fails = sum(c.status == "fail" for c in report.checks)
    click.echo(
        f"\n{report.status}: {len(report.checks)} checks, {warns} warning(s), {fails} failure(s)"
        + (f", {len(report.skipped)} skipped" if report.skipped else "")
    )
