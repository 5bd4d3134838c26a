"""Entry point of the `gormes` command.

Subcommands are imported only when they run, so `gormes --help` stays fast: add
a command by naming its module and attribute in `COMMANDS`. Errors of gormes's
own (`GormesError`) become one line on stderr and a non-zero exit, never a
traceback; so do the few other errors bad input or a bad disk can raise anywhere
(`_error_line`: a number too big, JSON nested too deep, a full or read-only disk).
Everything printed for people passes `output.guard_standard_streams`: no control
sequence from the data reaches the terminal.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from pathlib import Path

import click

COMMANDS: dict[str, tuple[str, str, str]] = {
    # name: (module, attribute, one-line help shown by `gormes --help`)
    "events": ("gormes.cli.events", "events", "List events from the log."),
    "tail": ("gormes.cli.tail", "tail", "Print events as JSON lines; --follow keeps printing new ones."),
    "append": ("gormes.cli.append", "append", "Append one typed event to a stream."),
    "import": ("gormes.cli.jsonl", "import_", "Append events from a JSONL file (one event per line)."),
    "export": ("gormes.cli.jsonl", "export", "Write the log (or part of it) as JSONL."),
    "redact": ("gormes.cli.redact", "redact", "Erase the data of a stream's events or of one event (tombstones; operator only)."),
    "retain": ("gormes.cli.retain", "retain", "Archive the job, run and cron streams that ended before a horizon, then delete them (operator only)."),
    "types": ("gormes.cli.events", "types", "List the event types this gormes knows."),
    "query": ("gormes.cli.query", "query", "Run a read-only SQL query against the database."),
    "projections": ("gormes.cli.projections", "projections", "Show, rebuild or check projections."),
    "demo": ("gormes.cli.demo", "demo", "Run the demo: several actors append, a tail follows, a projection prints."),
    "jobs": ("gormes.cli.jobs", "jobs", "Submit, list, inspect and steer durable jobs."),
    "worker": ("gormes.cli.worker", "worker", "Run job handlers until SIGINT or SIGTERM."),
    "daemon": ("gormes.cli.daemon", "daemon", "Run workers, projections, cron and the governor as one service (systemd-ready)."),
    "cron": ("gormes.cli.cron", "cron", "Add, list, pause, resume and remove cron schedules."),
    "budget": ("gormes.cli.budget", "budget", "Set, raise, show and list budgets: caps on what runs may spend."),
    "approve": ("gormes.cli.approve", "approve", "Approve a pending approval request (a run's call waiting for a person)."),
    "deny": ("gormes.cli.approve", "deny", "Deny a pending approval request: the run's call fails as denied."),
    "approvals": ("gormes.cli.approve", "approvals", "List approval requests: calls of operations that wait for a person."),
    "run": ("gormes.cli.run_operations", "run", "Start an agent run (or any run handler) and wait for its outcome."),
    "runs": ("gormes.cli.runs", "runs", "List recorded runs; show one as a timeline and a tree."),
    "trace": ("gormes.cli.trace", "trace", "Export a recorded run as OpenTelemetry spans over OTLP/HTTP (after the fact)."),
    "replay": ("gormes.cli.replay", "replay", "Replay a recorded run exactly (no side effects); name the first divergence."),
    "fork": ("gormes.cli.fork", "fork", "Copy a run up to a position into a new run and continue it live."),
    "ops": ("gormes.cli.ops", "ops", "List operations, print the tool schemas a trust class gets, call one as the operator."),
    "mcp": ("gormes.cli.mcp", "mcp", "Serve the operations as MCP tools over stdio (for Claude Code, Codex, any MCP client)."),
    "doctor": ("gormes.cli.doctor", "doctor", "Check the health of the database, queue, workers and operations."),
    "audit": ("gormes.cli.audit", "audit", "Export the audit trail of operation calls as JSON lines."),
    "skills": ("gormes.cli.skills", "skills", "Check, list, route and promote the SKILL.md skills."),
    "eval": ("gormes.cli.eval", "eval_", "Run evals: skill routing, recall, and recorded runs re-run as forks on another model or prompt."),
    "memory": ("gormes.cli.memory", "memory", "Add, review and mirror memory (entities, relationships, facts with provenance)."),
    "recall": ("gormes.cli.recall", "recall", "Recall memory for a query: lexical, graph, semantic or fused, with scores and reasons."),
    "top": ("gormes.cli.top", "top", "A live view of jobs, runs, workers, approvals and budgets; keys pause, resume, cancel, approve, deny."),
    "migrate": ("gormes.cli.migrate", "migrate", "Copy the event log from SQLite to PostgreSQL, positions preserved, verified by counts and a hash."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        spec = COMMANDS.get(name)
        if spec is None:
            return None
        module = importlib.import_module(spec[0])
        return getattr(module, spec[1])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


class Config:
    """What every command gets from the global options."""

    def __init__(self, db: str | None, option: str = "--db") -> None:
        self._given = db
        self._option = option  # what a refusal names: --db, or GORMES_DB when it came from there
        self._resolved: str | Path | None = None

    def _target(self) -> str | Path:
        """The URL as given (a Path would fold its `//`), or the SQLite path; read
        when a command first asks, so `gormes --db ... CMD --help` still helps.
        `store_target` refuses whatever is neither (decision 0089)."""
        if self._resolved is None:
            # Lazy for start-up time: `gormes --help` loads click and this module only.
            from gormes.events.open import is_postgres_url, store_target
            from gormes.events.sqlite_schema import default_db_path

            if not self._given:
                self._resolved = default_db_path()
            else:
                target = store_target(self._given, self._option)
                self._resolved = target if is_postgres_url(target) else Path(target)
        return self._resolved

    @property
    def url(self) -> str | None:
        """The PostgreSQL URL, or None for an SQLite file."""
        target = self._target()
        return target if isinstance(target, str) else None

    @property
    def db(self) -> Path:
        """The SQLite file, for the commands that run on SQLite only.

        With a PostgreSQL URL this refuses in one line: taken for a path, the URL
        would become a new SQLite file under a directory named `postgresql:`."""
        target = self._target()
        if isinstance(target, str):
            # Lazy for start-up time: `gormes --help` loads click and this module only.
            from gormes.errors import UserError

            ctx = click.get_current_context(silent=True)
            command = ctx.command_path if ctx is not None else "this command"
            raise UserError(
                f"`{command}` runs on an SQLite file only, not on PostgreSQL yet "
                "(docs/postgres.md lists what does); give --db a file path"
            )
        return target

    @property
    def target(self) -> str | Path:
        """What `gormes.events.open.open_store` takes: the URL, or the SQLite path
        (for the commands that run on either backend: jobs, worker, daemon)."""
        return self._target()


@click.group(cls=LazyGroup)
@click.option(
    "--db",
    envvar="GORMES_DB",
    metavar="PATH|URL",
    help="SQLite file (or sqlite:PATH) or postgresql:// URL (env GORMES_DB; "
    "default $XDG_DATA_HOME/gormes/gormes.db).",
)
@click.option(
    "--durability",
    type=click.Choice(["full", "normal"]),
    envvar="GORMES_DURABILITY",
    help="full (default): every commit is fsynced. normal: faster; the last commits "
    "may be lost on power loss (never corrupted). Env GORMES_DURABILITY.",
)
@click.version_option(package_name="gormes")
@click.pass_context
def cli(ctx: click.Context, db: str | None, durability: str | None) -> None:
    """gormes: an event-sourced actor runtime for AI agents.

    Every state change is a typed event in one SQLite log; read models are
    projections of it.
    """
    if durability:
        # every store this process opens picks it up (see sqlite_log.default_durability)
        os.environ["GORMES_DURABILITY"] = durability
    from_env = ctx.get_parameter_source("db") is click.core.ParameterSource.ENVIRONMENT
    ctx.obj = Config(db, "GORMES_DB" if from_env else "--db")


# OS errors that say the disk or the file system refused, not that gormes is wrong.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                         errno.EIO, errno.EFBIG})


def _error_line(exc: BaseException) -> tuple[str, int] | None:
    """One line and an exit code for an error that no command translated, None
    for a bug (which keeps its traceback).

    A database's own error (the server shutting down under a command, say) and an
    I/O failure exit 1; a number out of range or input nested past what can be
    decoded is bad input, exit 2. psycopg is looked up by module, not imported."""
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _error_line(exc.exceptions[0])
    # Lazy for start-up time: `gormes --help` loads click and this module only.
    from gormes.errors import GormesError

    if isinstance(exc, GormesError):
        return str(exc), getattr(exc, "exit_code", 1)
    if isinstance(exc, RecursionError):
        return "input nested too deeply to read", 2
    if isinstance(exc, UnicodeEncodeError):
        return f"text that is not valid UTF-8: {ascii(exc.object[exc.start:exc.end])}", 2
    if isinstance(exc, OverflowError):
        return f"a number is out of range ({exc})", 2
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        where = f": {exc.filename}" if exc.filename else ""
        return f"I/O error: {exc.strerror}{where}", 1
    module = type(exc).__module__
    if module.startswith("psycopg") or module == "sqlite3":
        text = str(exc).strip()
        return f"database error: {text.splitlines()[0] if text else type(exc).__name__}", 1
    return None


def main(argv: list[str] | None = None) -> None:
    # Lazy for start-up time: `gormes --help` loads click and this module only.
    from gormes.errors import GormesError
    from gormes.printable import guard_standard_streams

    guard_standard_streams()
    not_utf8 = _first_not_utf8(sys.argv[1:] if argv is None else argv)
    if not_utf8 is not None:
        click.echo(f"gormes: error: an argument is not valid UTF-8: {ascii(not_utf8)}", err=True)
        sys.exit(2)
    try:
        code = cli.main(args=argv, prog_name="gormes", standalone_mode=False)
        sys.stdout.flush()  # a full disk under stdout fails here, not at exit
    except click.exceptions.Abort:
        click.echo("gormes: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"gormes: error: {_click_error_line(exc)}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except GormesError as exc:
        click.echo(f"gormes: error: {exc}", err=True)
        sys.exit(getattr(exc, "exit_code", 1))
    except BrokenPipeError:
        # Output piped into `head` and the like: not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
    except Exception as exc:  # noqa: BLE001 - one line for what bad input or a bad disk raises
        found = _error_line(exc)
        if found is None:
            raise
        if isinstance(exc, OSError):
            _discard_stdout()
        click.echo(f"gormes: error: {found[0]}", err=True)
        sys.exit(found[1])
    sys.exit(code if isinstance(code, int) else 0)


def _first_not_utf8(args: list[str]) -> str | None:
    """The first argument that cannot be UTF-8 (bytes the locale could not decode,
    kept by Python as lone surrogates): every name, payload and path gormes records
    is UTF-8 text."""
    for arg in args:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return arg
    return None


def _click_error_line(exc: click.ClickException) -> str:
    """click's usage error (usage, hint, message: four lines) as one line. A group
    given no command (click raises its whole help as the message) names its commands."""
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.exceptions.NoArgsIsHelpError) and isinstance(ctx and ctx.command, click.Group):
        names = ctx.command.list_commands(ctx)
        return f"Missing command: one of {', '.join(names)} (see `{ctx.command_path} --help`)"
    line = " ".join(exc.format_message().split())
    if isinstance(exc, click.UsageError) and ctx is not None:
        line += f" (see `{ctx.command_path} --help`)"
    return line


def _discard_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered for it (it could not be
    written: a full disk) then goes nowhere at exit instead of failing again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    main()
