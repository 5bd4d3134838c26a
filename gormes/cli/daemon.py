"""`gormes daemon`: workers, projection runners, cron and the governor in one
process, ready for systemd (Type=notify); see gormes/daemon.py and docs/systemd.md."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import click

from gormes.cli.imports import import_option, mcp_config_option

# Options whose value, when given, overrides the settings file (SIGHUP re-reads it).
_OVERRIDABLE = ("queues", "concurrency", "imports", "shutdown_grace_ms", "lease_ms",
                "status_interval_s", "governor", "cron", "mcp_config", "model_timeout_s", "model_retries",
                "metrics_port")


@click.command()
@click.option("--queue", "queues", multiple=True, metavar="Q",
              help="Claim only from this queue (repeatable; default: every queue).")
@click.option("--concurrency", type=click.IntRange(1, 10_000), default=10, show_default=True,
              help="Most jobs run at once (the governor may lower it under load).")
@import_option
@mcp_config_option
@click.option("--model-timeout", "model_timeout_s", type=click.FloatRange(min=0, min_open=True),
              metavar="SECONDS", help="How long one model request of an agent job may take "
              "(default: env GORMES_MODEL_TIMEOUT, else 120).")
@click.option("--model-retries", "model_retries", type=click.IntRange(min=0), metavar="N",
              help="Retries of a model request that failed retryably (default: env GORMES_MODEL_RETRIES, else 3).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="TOML settings (queues, concurrency, imports, mcp_config, model_timeout_s, model_retries, "
              "shutdown_grace_ms, lease_ms, status_interval_s, governor, [governor_policy], cron); SIGHUP "
              "re-reads it. Options given on the command line win.")
@click.option("--shutdown-grace", "shutdown_grace_ms", type=click.IntRange(min=0), default=10_000,
              show_default=True, metavar="MS",
              help="On SIGTERM, how long in-flight jobs may finish before they are released.")
@click.option("--lease", "lease_ms", type=click.IntRange(min=100), default=30_000,
              show_default=True, metavar="MS", help="Job lock lease; renewed every lease/2.")
@click.option("--status-interval", "status_interval_s", type=click.FloatRange(min=0.01),
              default=10.0, show_default=True, metavar="S",
              help="How often to send systemd a STATUS= line.")
@click.option("--governor/--no-governor", default=True, show_default=True,
              help="Adapt concurrency to CPU and memory load; memory circuit breaker.")
@click.option("--cron/--no-cron", default=True, show_default=True,
              help="Fire cron schedules (exactly once even with several daemons).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Serve Prometheus /metrics on 127.0.0.1:PORT (default: off; docs/observe.md). "
              "Traces are exported when OTEL_EXPORTER_OTLP_ENDPOINT is set.")
@click.option("--log-format", type=click.Choice(["auto", "journal", "plain"]), default="auto",
              show_default=True, help="journal: <N> syslog priority prefixes, no timestamps "
              "(auto picks it when stderr is the journal).")
@click.pass_context
def daemon(ctx: click.Context, config_path: Path | None, log_format: str, **options: Any) -> None:
    """Run workers, projection runners, cron and the governor until SIGTERM.

    With NOTIFY_SOCKET set it speaks systemd's notify protocol: READY=1, STATUS=,
    WATCHDOG=1, STOPPING=1, RELOADING=1. SIGHUP reloads settings and handler
    modules (--import and the file's `imports`: their operations, run and job
    handlers); SIGTERM drains (a second SIGTERM releases in-flight jobs at once).
    """
    # Lazy for start-up time: loaded when the command runs, not for its --help.
    from gormes.daemon import Daemon, HandlerLoader, apply_to_environment, environment_at_start, load_settings
    from gormes.tools.sources import read_mcp_config
    from gormes.logging_setup import setup_logging
    from gormes.systemd import Notifier

    overrides = {
        key: value for key, value in options.items()
        if key in _OVERRIDABLE and (
            config_path is None
            or ctx.get_parameter_source(key) is not click.core.ParameterSource.DEFAULT
        )
    }
    settings = load_settings(config_path, overrides)
    setup_logging(journal=None if log_format == "auto" else log_format == "journal")
    # Handler modules load before the database is touched: a bad one changes nothing.
    loader = HandlerLoader()
    handlers = loader.load(settings.imports)
    read_mcp_config(settings.mcp_config)  # so is a bad MCP configuration
    environment = environment_at_start()  # what the file's settings go over, at each reload too
    apply_to_environment(settings, environment)
    notifier = Notifier.from_environment()
    # A SIGTERM that arrives before trio listens still ends us cleanly.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    import trio

    runner = Daemon(ctx.obj.target, settings, notifier=notifier, loader=loader, handlers=handlers,
                    config_path=config_path, overrides=overrides, environment=environment)
    try:
        trio.run(runner.run)
    finally:
        notifier.close()
