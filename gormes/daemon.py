"""The gormes daemon: job workers, the projection runners, the cron scheduler and
the resource governor in one trio process, speaking systemd's notify protocol.

Start-up: load the handler modules (a bad one fails before the database is
touched), open the store, catch the job ledger and every asynchronous projection
up with the log, start the worker and the cron scheduler, then send READY=1.
While it runs it sends STATUS= lines (queue depth, active jobs) and, when the
unit has a watchdog, WATCHDOG=1 every half interval after a read of the log head
proves the database still answers.

Signals:
- SIGTERM or SIGINT: STOPPING=1; cron stops firing, the workers stop claiming,
  in-flight jobs get `shutdown_grace_ms` to finish, then the rest are released
  (back to waiting, no attempt consumed) for another worker to reclaim. A second
  signal ends the grace at once. Exit status 0.
- SIGHUP: RELOADING=1; read the configuration file again (if any), reload the
  imported modules (importlib.reload for modules, re-executed for files: their
  job handlers, run handlers and operations, gormes/tools/imports.py), start a
  worker with the new handlers and let the old one finish what it holds
  (it claims nothing more); READY=1. A reload that fails keeps everything as it
  was and says why.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import trio

from gormes.actors.agent_jobs import install as agent_jobs
from gormes.actors.cron.scheduler import CronScheduler
from gormes.actors.jobs.governor import Governor, GovernorSettings
from gormes.actors.jobs.handlers import HandlerRegistry, default_registry
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.worker import Worker, WorkerConfig, new_worker_id
from gormes.actors.runs.cut_off import GoneProcessRuns
from gormes.actors.runs.approvals import (
    DEFAULT_TIMEOUT_S, ON_TIMEOUT_ENV, REQUIRE_ENV, TIMEOUT_ENV, ApprovalPolicy,
)
from gormes.control.rate_rules import OUTAGE_AFTER_ENV, RATE_LIMITS_ENV, outage_after, parse_rule
from gormes.errors import GormesError, UserError
from gormes.events.jobs import MAX_DELAY_MS
from gormes.events.open import open_store
from gormes.events.store import EventStore
from gormes.ops.declared import declared
from gormes.ops.executor import Executor
from gormes.ops.registry import Registry
from gormes.ops.spec import Caller, OperationSpec
from gormes.projections import ledger, registry
from gormes.projections.runner import ProjectionRunner
from gormes.projections.schema import supports
from gormes.systemd import Notifier
from gormes.telemetry import daemon as telemetry
from gormes.tools.builtin import default_registry as default_operations
from gormes.tools.imports import load_imports
from gormes.tools.retention import RetainInput
from gormes.tools.sources import operation_registry

log = logging.getLogger("gormes.daemon")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The workers' own grace is set out of reach: the daemon ends the grace itself
# (Worker.hurry), so that a reload can let an old worker finish without a limit.
_UNBOUNDED_GRACE_MS = 7 * 24 * 3600 * 1000
# How often runs outside a job whose process is gone are looked for (a query on the
# runs projection's status index, then a process lookup per run with no end).
GONE_PROCESS_SWEEP_S = 5.0


class InvalidSettings(UserError):
    """A daemon configuration file or option that cannot be used."""


class DaemonSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What `gormes daemon` runs with; a `--config` TOML file has the same keys."""

    queues: tuple[str, ...] = ()  # empty: every queue
    concurrency: int = 10
    imports: tuple[str, ...] = ()
    shutdown_grace_ms: int = 10_000
    lease_ms: int = 30_000
    status_interval_s: float = 10.0
    governor: bool = True
    # The `[governor_policy]` table: floor, cpu ("process" or "machine"), cpu_high,
    # cpu_low, memory_high, memory_low, memory_breaker, interval_s (gormes/actors/jobs/governor.py).
    governor_policy: GovernorSettings = GovernorSettings()
    cron: bool = True
    # External MCP servers whose tools the agent jobs' runs may call (a file as
    # `--mcp-config` takes: docs/tools.md); started with the daemon, for its life.
    mcp_config: str | None = None
    # Each model request's timeout in seconds (None: GORMES_MODEL_TIMEOUT, else 120).
    model_timeout_s: float | None = None
    # Retries of a model request that failed retryably (None: GORMES_MODEL_RETRIES, else 3).
    model_retries: int | None = None
    # Prometheus `/metrics` on this loopback port (None: off); docs/observe.md.
    metrics_port: int | None = None
    # Retention (docs/retention.md): every `retain_every_s`, the job, run and cron
    # streams that ended more than `retain_older_than_days` ago are archived to
    # `retain_archive` (SQLite default: beside the file) and deleted (None: off).
    retain_older_than_days: float | None = None
    retain_archive: str | None = None
    retain_every_s: float = 86_400.0
    # Provider rate limits shared by every worker (rules as GORMES_RATE_LIMITS takes,
    # "openai:gpt-4o=500rpm,200000tpm"; empty: GORMES_RATE_LIMITS), and the consecutive
    # retryable failures that halt a provider's turns (None: GORMES_OUTAGE_AFTER, else 5;
    # 0: never): docs/control.md.
    rate_limits: tuple[str, ...] = ()
    outage_after: int | None = None
    # Operations (names, fnmatch patterns) whose calls by runs wait for `gormes approve`,
    # how long a request waits (None: a day) and what its timeout does: deny or fail
    # (GORMES_REQUIRE_APPROVAL, ..._TIMEOUT, ..._ON_TIMEOUT; decision 0033).
    require_approval: tuple[str, ...] = ()
    approval_timeout_s: float | None = None
    approval_on_timeout: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= 10_000:
            raise InvalidSettings(f"concurrency must be 1..10000, got {self.concurrency}")
        # TOML has nan and inf: each passes a plain comparison one way or the other,
        # and then a sleep, a deadline or a timestamp made from it fails in the running
        # daemon (a reload would have "succeeded" and then killed it).
        for name in ("status_interval_s", "model_timeout_s", "retain_every_s", "retain_older_than_days",
                     "approval_timeout_s"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise InvalidSettings(f"{name} must be a finite number, got {value}")
        for name in ("shutdown_grace_ms", "lease_ms"):
            if getattr(self, name) > MAX_DELAY_MS:
                raise InvalidSettings(f"{name} must be at most {MAX_DELAY_MS} (ten years), got {getattr(self, name)}")
        if self.shutdown_grace_ms < 0 or self.lease_ms < 100 or self.status_interval_s <= 0:
            raise InvalidSettings("shutdown_grace_ms >= 0, lease_ms >= 100 and status_interval_s > 0")
        if self.retain_older_than_days is not None and self.retain_older_than_days * 86_400_000 > MAX_DELAY_MS:
            raise InvalidSettings(f"retain_older_than_days must be at most ten years, got {self.retain_older_than_days}")
        if self.model_retries is not None and self.model_retries < 0:
            raise InvalidSettings(f"model_retries must be 0 or more, got {self.model_retries}")
        if self.model_timeout_s is not None and not self.model_timeout_s > 0:
            raise InvalidSettings(f"model_timeout_s must be > 0 seconds, got {self.model_timeout_s}")
        if self.retain_older_than_days is not None and not self.retain_older_than_days >= 0:
            raise InvalidSettings(f"retain_older_than_days must be 0 or more, got {self.retain_older_than_days}")
        if not self.retain_every_s > 0:
            raise InvalidSettings(f"retain_every_s must be > 0 seconds, got {self.retain_every_s}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise InvalidSettings(f"metrics_port must be 0..65535, got {self.metrics_port}")
        try:
            for rule in self.rate_limits:
                parse_rule(rule)
            if self.outage_after is not None:
                outage_after(self.outage_after)
        except UserError as exc:
            raise InvalidSettings(f"rate_limits: {exc}") from None
        try:
            ApprovalPolicy(require=self.require_approval, on_timeout=self.approval_on_timeout or "deny",  # type: ignore[arg-type]
                           timeout_s=DEFAULT_TIMEOUT_S if self.approval_timeout_s is None else self.approval_timeout_s)
        except UserError as exc:
            raise InvalidSettings(f"approvals: {exc}") from None
        try:
            self.governor_policy.policy(ceiling=self.concurrency)
        except ValueError as exc:
            raise InvalidSettings(f"governor_policy: {exc} (concurrency {self.concurrency} is the ceiling)") from None


def load_settings(path: Path | None, overrides: Mapping[str, Any]) -> DaemonSettings:
    """The settings file (if any) with the options given on the command line on top."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            values = tomllib.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise InvalidSettings(f"cannot read daemon settings {str(path)!r}: {exc}") from None
    values.update(overrides)
    try:
        return msgspec.convert(values, DaemonSettings)
    except msgspec.ValidationError as exc:
        raise InvalidSettings(f"bad daemon settings: {exc}") from None


MODEL_TIMEOUT_ENV, MODEL_RETRIES_ENV = "GORMES_MODEL_TIMEOUT", "GORMES_MODEL_RETRIES"
# What the settings file sets for every provider and run the daemon opens, through
# the variables they read (gormes/providers/config.py, gormes/control/rate_rules.py,
# gormes/actors/runs/approvals.py).
SETTINGS_ENV = (MODEL_TIMEOUT_ENV, MODEL_RETRIES_ENV, RATE_LIMITS_ENV, OUTAGE_AFTER_ENV,
                REQUIRE_ENV, TIMEOUT_ENV, ON_TIMEOUT_ENV)


def environment_at_start(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of SETTINGS_ENV as the daemon found them when it started."""
    env = os.environ if env is None else env
    return {name: env[name] for name in SETTINGS_ENV if name in env}


def apply_to_environment(settings: DaemonSettings, at_start: Mapping[str, str] | None = None) -> None:
    """The file's settings over the environment the daemon started with
    (`at_start`, environment_at_start; None: the environment as it is now), anew at
    each reload: a setting the file no longer names is the environment's again, not
    the previous file's.

    Limits and gates are never dropped by the file. Its rate rules come first (the
    first rule to match a key wins) and the environment's follow, so a key only the
    environment limits stays limited; its approval rules add to the environment's
    (an attacker's finding: the file's list replaced the environment's, silently
    un-gating what it named)."""
    wanted = environment_at_start() if at_start is None else dict(at_start)
    if settings.model_timeout_s is not None:
        wanted[MODEL_TIMEOUT_ENV] = repr(settings.model_timeout_s)
    if settings.model_retries is not None:
        wanted[MODEL_RETRIES_ENV] = str(settings.model_retries)
    rules = " ".join([*settings.rate_limits, wanted.get(RATE_LIMITS_ENV, "")]).strip()
    wanted[RATE_LIMITS_ENV] = rules
    if settings.outage_after is not None:
        wanted[OUTAGE_AFTER_ENV] = str(settings.outage_after)
    required = [p for p in wanted.get(REQUIRE_ENV, "").replace(",", " ").split() if p]
    required += [p for p in settings.require_approval if p not in required]
    wanted[REQUIRE_ENV] = ",".join(required)
    if settings.approval_timeout_s is not None:
        wanted[TIMEOUT_ENV] = repr(settings.approval_timeout_s)
    if settings.approval_on_timeout is not None:
        wanted[ON_TIMEOUT_ENV] = settings.approval_on_timeout
    for name in SETTINGS_ENV:
        if wanted.get(name):
            os.environ[name] = wanted[name]
        else:
            os.environ.pop(name, None)


class HandlerLoader:
    """Loads `--import` specs (gormes/tools/imports.py) and loads them again on
    reload; returns the job handlers, the `agent` one installed in each (unless a
    module registers its own). The operations they declare are in the default
    operation registry, which each agent job's executor is built from."""

    def __init__(self) -> None:
        self._builtin = default_registry.copy()
        self._loaded: set[str] = set()
        # The MCP servers' tools (specs with a `source`), once the daemon started them:
        # the agent jobs' runs call them beside the built-in and declared operations.
        self.external: tuple[OperationSpec, ...] = ()

    def load(self, specs: tuple[str, ...]) -> HandlerRegistry:
        load_imports(specs, reload=self._loaded)
        self._loaded.update(specs)
        return self.handlers()

    def handlers(self) -> HandlerRegistry:
        """The job handlers as the imports left them, with the `agent` one."""
        fresh = self._builtin.copy()
        # `@gormes.job` registers into the default registry; take what is there now.
        for name in default_registry.names():
            handler = default_registry.get(name)
            assert handler is not None
            fresh.register(name, handler)
        operations = Registry([*default_operations().list(), *self.external]) if self.external else None
        agent_jobs.install(fresh, operations)
        return fresh


class Daemon:
    def __init__(
        self,
        db: str | Path,  # an SQLite path or a PostgreSQL URL
        settings: DaemonSettings,
        *,
        notifier: Notifier,
        loader: HandlerLoader,
        handlers: HandlerRegistry,
        config_path: Path | None = None,
        overrides: Mapping[str, Any] | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.db = db
        self.environment = environment_at_start() if environment is None else dict(environment)
        self.settings = settings
        self.notifier = notifier
        self.loader = loader
        self.handlers = handlers
        self.config_path = config_path
        self.overrides = dict(overrides or {})
        self.workers: list[Worker] = []  # the current one last; older ones are draining
        self.queue: JobQueue | None = None
        self.scheduler: CronScheduler | None = None
        self._stop = trio.Event()
        self._hurry = trio.Event()
        self._cron_scope = trio.CancelScope()

    @property
    def worker(self) -> Worker:
        return self.workers[-1]

    async def run(self) -> None:
        with trio.open_signal_receiver(*STOP_SIGNALS, signal.SIGHUP) as signals:
            async with (
                open_store(self.db) as store,
                operation_registry(store, self.settings.mcp_config, warn=log.warning) as operations,
            ):
                if self.settings.mcp_config is not None:
                    self.loader.external = tuple(op for op in operations.list() if op.source is not None)
                    self.handlers = self.loader.handlers()
                self.queue = queue = await JobQueue.open(store)
                runners = await self._caught_up_runners(store)
                async with trio.open_nursery() as nursery:
                    for runner in runners:
                        nursery.start_soon(self._follow, runner)
                    await self._start_worker(nursery)
                    if self.settings.cron:
                        self.scheduler = CronScheduler(queue, scheduler_id=f"cron:{self.worker.id}")
                        await nursery.start(self._run_cron)
                    nursery.start_soon(self._answer_signals, signals, nursery)
                    nursery.start_soon(self._report_status)
                    nursery.start_soon(self._end_runs_of_gone_processes, store)
                    if self.settings.retain_older_than_days is not None:
                        nursery.start_soon(self._retain, Executor(operations, store, jobs=queue))
                    if self.notifier.watchdog_interval is not None:
                        nursery.start_soon(self._keep_watchdog_fed, store)
                    await telemetry.start(nursery, store, self.settings.metrics_port, self._worker_gauges)
                    status = await self._status_line()
                    self.notifier.ready(status)
                    log.info("ready: %s", status)
                    await self._stop.wait()
                    await self._drain()
                    nursery.cancel_scope.cancel()

    # -- start-up ------------------------------------------------------------------

    async def _caught_up_runners(self, store: EventStore) -> list[ProjectionRunner]:
        runners = []
        for projection in registry.all_projections():
            if projection.name == ledger.NAME:
                continue  # inline: kept current inside every append (JobQueue.open)
            if not supports(projection, store):
                # a projection without a portable schema (none today: docs/postgres.md)
                log.warning("PostgreSQL: projection %s runs on SQLite only; not running it",
                            projection.name)
                continue
            runner = ProjectionRunner(store, projection)
            try:
                await runner.catch_up()
            except GormesError as exc:
                log.error("projection %s cannot catch up: %s", projection.name, exc)
            runners.append(runner)
        return runners

    async def _follow(self, runner: ProjectionRunner) -> None:
        """Follow the log; a failed batch is retried with a growing pause (the
        failure is recorded where `gormes doctor` and `projections status` see it)."""
        pause = 1.0
        while True:
            try:
                await runner.run()
            except GormesError as exc:
                log.error("projection %s stopped: %s; retrying in %.0f s", runner.name, exc, pause)
                await trio.sleep(pause)
                pause = min(60.0, pause * 2)

    async def _end_runs_of_gone_processes(self, store: EventStore) -> None:
        """Runs outside a job whose process on this host is gone (killed) have no
        end: record them as cut off (gormes/actors/runs/cut_off.py)."""
        sweep = GoneProcessRuns(store)
        while True:
            try:
                for run_id in await sweep.sweep():
                    log.warning("run %s: cut off, its process is gone; recorded as cancelled", run_id)
            except GormesError as exc:
                log.error("sweep of runs whose process is gone failed: %s", exc)
            except Exception:  # noqa: BLE001 - a sweep bug must not stop the daemon's jobs
                log.exception("sweep of runs whose process is gone crashed")
            await trio.sleep(GONE_PROCESS_SWEEP_S)

    async def _retain(self, executor: Executor) -> None:
        """The retention policy: log.retain as `system`, at start-up and then every
        `retain_every_s` (audited like the operator's `gormes retain`)."""
        settings = self.settings
        assert settings.retain_older_than_days is not None
        value = RetainInput(older_than_s=settings.retain_older_than_days * 86_400.0, archive=settings.retain_archive)
        while True:
            try:
                done = await executor.call("log.retain", value, Caller(trust="system", id="daemon"))
                if done.streams:
                    log.info("retention: archived %d stream(s), %d event(s) to %s",
                             done.streams, done.events, done.segment)
                else:
                    log.info("retention: nothing to archive (nothing ended more than %s day(s) ago)",
                             f"{settings.retain_older_than_days:g}")
            except GormesError as exc:
                log.error("retention failed: %s", exc)
            except Exception:  # noqa: BLE001 - a retention bug must not stop the daemon's jobs
                log.exception("retention crashed")
            await trio.sleep(settings.retain_every_s)

    async def _run_cron(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        assert self.scheduler is not None
        with self._cron_scope:
            await self.scheduler.run(task_status=task_status)

    async def _start_worker(self, nursery: trio.Nursery) -> Worker:
        settings = self.settings
        assert self.queue is not None
        governor = (
            Governor(settings.governor_policy.policy(ceiling=settings.concurrency))
            if settings.governor else None
        )
        config = WorkerConfig(
            worker_id=new_worker_id(), queues=settings.queues or None,
            concurrency=settings.concurrency, lease_ms=settings.lease_ms,
            shutdown_grace_ms=_UNBOUNDED_GRACE_MS,
        )
        worker_log = logging.getLogger("gormes.worker")
        worker = Worker(self.queue, self.handlers, config, governor=governor,
                        log=lambda line: worker_log.warning("%s: %s", config.worker_id, line),
                        sweeps=agent_jobs.sweeps(self.queue, config))
        await nursery.start(worker.run)
        self.workers.append(worker)
        log.info("worker %s: handlers %s; declared operations %s; concurrency %d; queues %s", worker.id,
                 ", ".join(self.handlers.names()), ", ".join(s.name for s in declared.specs()) or "none",
                 settings.concurrency, ", ".join(settings.queues) or "all")
        return worker

    # -- signals -----------------------------------------------------------------------

    async def _answer_signals(self, signals: Any, nursery: trio.Nursery) -> None:
        async for signum in signals:
            if signum == signal.SIGHUP:
                if not self._stop.is_set():
                    await self._reload(nursery)
            elif not self._stop.is_set():
                log.info("%s: stopping", signal.Signals(signum).name)
                self.notifier.stopping("stopping: finishing in-flight jobs")
                self._stop.set()
            else:
                log.info("%s again: releasing in-flight jobs now", signal.Signals(signum).name)
                self._hurry.set()

    async def _reload(self, nursery: trio.Nursery) -> None:
        self.notifier.reloading()
        log.info("SIGHUP: reloading settings and handler modules")
        try:
            settings = load_settings(self.config_path, self.overrides)
            handlers = self.loader.load(settings.imports)
        except GormesError as exc:
            log.error("reload failed, still running as before: %s", exc)
            self.notifier.ready(f"reload failed: {exc}")
            return
        if settings.mcp_config != self.settings.mcp_config:
            log.warning("mcp_config changed: the MCP servers are started once, with the daemon; "
                        "restart it to use %s", settings.mcp_config)
        apply_to_environment(settings, self.environment)
        old = self.worker
        self.settings, self.handlers = settings, handlers
        await self._start_worker(nursery)
        old.stop()  # claims nothing more; what it holds runs to the end
        nursery.start_soon(self._forget_when_stopped, old)
        status = await self._status_line()
        self.notifier.ready(status)
        log.info("reloaded: %s", status)

    async def _forget_when_stopped(self, worker: Worker) -> None:
        await worker.wait_stopped()
        if worker in self.workers[:-1]:
            self.workers.remove(worker)
        log.info("worker %s: stopped after reload (%d completed, %d failed)",
                 worker.id, worker.completed, worker.failed)

    # -- shutdown ------------------------------------------------------------------

    async def _drain(self) -> None:
        self._cron_scope.cancel()
        workers = list(self.workers)
        for worker in workers:
            worker.stop()
        with trio.move_on_after(self.settings.shutdown_grace_ms / 1000):
            async with trio.open_nursery() as waiting:
                waiting.start_soon(_cancel_when, self._hurry, waiting.cancel_scope)
                waiting.start_soon(_wait_all_stopped, workers, waiting.cancel_scope)
        released = sum(len(w.active) for w in workers)
        for worker in workers:
            worker.hurry()
        if released:
            log.info("grace over: releasing %d in-flight job(s) for another worker", released)
        await _wait_all_stopped(workers)
        completed = sum(w.completed for w in workers)
        failed = sum(w.failed for w in workers)
        log.info("stopped (%d completed, %d failed)", completed, failed)
        abandoned = sum(w.abandoned for w in workers)
        if abandoned:
            # Abandoned handlers may never return; all our writes are committed,
            # so leaving now loses nothing (as `gormes worker` does).
            log.warning("leaving %d abandoned handler(s) behind", abandoned)
            logging.shutdown()
            os._exit(0)

    def _worker_gauges(self) -> list[telemetry.WorkerGauge]:
        return [telemetry.WorkerGauge(worker_id=w.id, limit=w.limit, active=len(w.active),
                                      governor=w.governor.report() if w.governor else None)
                for w in self.workers]

    # -- status and watchdog -----------------------------------------------------------

    async def _status_line(self) -> str:
        assert self.queue is not None
        stats = await self.queue.stats()
        queues = self.settings.queues or tuple(stats.by_queue)
        waiting = sum(stats.by_queue.get(q, {}).get("waiting", 0) for q in queues)
        delayed = sum(stats.by_queue.get(q, {}).get("delayed", 0) for q in queues)
        active = sum(len(w.active) for w in self.workers)
        limit = self.worker.limit if self.workers else 0
        line = f"queue depth {waiting} waiting, {delayed} delayed; {active} active jobs (limit {limit})"
        if self.scheduler is not None:
            live = sum(1 for s in self.scheduler.states.values() if s.status == "active")
            line += f"; {live} cron schedules, {self.scheduler.fired} fired"
        return line

    async def _report_status(self) -> None:
        while True:
            await trio.sleep(self.settings.status_interval_s)
            try:
                self.notifier.status(await self._status_line())
            except GormesError as exc:
                log.warning("cannot read the queue for STATUS: %s", exc)

    async def _keep_watchdog_fed(self, store: EventStore) -> None:
        interval = self.notifier.watchdog_interval
        assert interval is not None
        due = trio.current_time()
        while True:
            # Only a daemon whose database still answers feeds the watchdog.
            with trio.move_on_after(interval):
                try:
                    await store.head()
                except GormesError as exc:
                    log.error("watchdog: the database does not answer: %s", exc)
                else:
                    self.notifier.watchdog()
            due += interval
            await trio.sleep_until(due)


async def _cancel_when(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _wait_all_stopped(workers: list[Worker], scope: trio.CancelScope | None = None) -> None:
    for worker in workers:
        await worker.wait_stopped()
    if scope is not None:
        scope.cancel()
