"""The job worker: claims jobs it has handlers for and runs them, N at a time.

    worker = Worker(queue, registry, WorkerConfig(concurrency=8))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        ...
        worker.stop()          # stop claiming, drain within a grace, release the rest

How a job runs: the handler runs in a task of its own under a cancel scope, and
the worker's lease keeper (gormes/actors/jobs/leases.py, one task for all jobs)
renews its lease every lease/2. The job settles when the handler finishes or
when there is a reason to abort it:

- timeout (the job's `timeout_ms`, measured on the trio clock): cancelled, then
  `dead` "timeout exceeded";
- pause or cancel by anyone (seen in the log): cancelled, nothing recorded (the
  pause or cancel already was);
- lease lost (renewal refused and confirmed by a re-read, or another holder):
  cancelled, nothing recorded, no attempt consumed;
- shutdown past the grace: cancelled and released, no attempt consumed;
- circuit breaker (memory pressure, from the governor): cancelled, `dead`.

A handler that ignores its cancellation for `abort_grace_ms` is abandoned: its
task is left behind, the job goes `dead` "handler ignored abort" (when the worker
still owns it) and the slot is freed, so the worker keeps serving.

A job with a timeout has an executor task (`_execute`) that waits for it to
settle or time out. A job without one (most) has no task besides its handler's:
when it settles (`_settled`), a handler that returned is handed to the round of
completions without waiting, and anything else (a failure, an abort) gets a task
(`_finish`) that waits out the abort grace and records what happened, as the
executor would.

Jobs that finish together are recorded in one transaction (completions.py),
which also claims the jobs that take their slots (`JobQueue.complete_and_claim`):
a busy worker commits once per round of jobs, not once to record and once to claim.

An idle worker waits for the log to grow (`store.wait_for_change`: in-process
wake-up; across processes, on SQLite, a write to the WAL file heard through
inotify, decision 0040, else a poll), so a new job is picked up within milliseconds. Sweeps run on intervals: stalled leases, due
delayed jobs, wall-clock timeouts, stranded parents, and the `sweeps` the worker
is handed by whoever wires it (the CLI and the daemon hand it the agent jobs'
cut-off sweep with the `agent` handler: gormes/actors/agent_jobs/install.py). A
heartbeat row in `worker_heartbeats` says which workers are alive (see
`heartbeat.py`).
"""

from __future__ import annotations

import functools
import math
import os
import socket
import sys
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

import msgspec
import trio

from gormes.actors.jobs.completions import Completions
from gormes.actors.jobs.governor import BREAKER_ERROR, Governor
from gormes.actors.jobs.handlers import Handler, HandlerRegistry, UnrecoverableError
from gormes.actors.jobs.heartbeat import Heartbeat
from gormes.actors.jobs.context import JobContext
from gormes.actors.jobs.leases import keep_leases, renew_leases
from gormes.actors.jobs.state import InvalidJob, InvalidTransition, JobNotFound, JobState, LockLost
from gormes.actors.jobs.queue import Job, JobQueue
from gormes.errors import GormesError
from gormes.events.jobs import MAX_DELAY_MS
from gormes.events.store import EventStore

IGNORED_ABORT = "handler ignored abort"
TIMEOUT_EXCEEDED = "timeout exceeded"

# Events on a job's stream after which a running holder may no longer own it.
CONTROL_TYPES = (
    "job.paused", "job.cancelled", "job.stalled", "job.timed_out",
    "job.released", "job.retried", "job.pruned",
)

# Why a handler was cancelled. Only timeout and breaker are recorded by the worker;
# shutdown releases the job; the others were recorded by whoever caused them.
TIMEOUT, BREAKER, SHUTDOWN, PAUSED, CANCELLED, LEASE_LOST = (
    "timeout", "circuit breaker", "shutdown", "paused", "cancelled", "lease lost",
)


def new_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


class WorkerConfig(msgspec.Struct, frozen=True, kw_only=True):
    worker_id: str = msgspec.field(default_factory=new_worker_id)
    queues: tuple[str, ...] | None = None  # None: every queue
    concurrency: int = 10
    lease_ms: int = 30_000
    stall_interval_ms: int = 5_000
    stall_grace_ms: int = 15_000
    promote_interval_ms: int = 250
    timeout_sweep_interval_ms: int = 5_000
    unblock_interval_ms: int = 5_000
    heartbeat_interval_ms: int = 5_000
    abort_grace_ms: int = 5_000
    shutdown_grace_ms: int = 10_000
    max_claims_per_round: int = 256  # one claim_many transaction; never past free slots

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= 10_000:
            raise ValueError(f"concurrency must be 1..10000, got {self.concurrency}")
        if not 2 <= self.lease_ms <= MAX_DELAY_MS:  # now + lease must fit the ledger's integers
            raise ValueError(f"lease must be 2..{MAX_DELAY_MS} ms (ten years), got {self.lease_ms}")


class Sweep(NamedTuple):
    """A task the worker runs every `interval_ms` beside its own sweeps; a failure
    is logged and the next round runs as usual."""

    interval_ms: int
    run: Callable[[], Awaitable[Any]]


class Outcome(msgspec.Struct):
    """What the handler did: returned `result`, raised `error`, or not finished."""

    finished: bool = False
    ok: bool = False
    result: Any = None
    error: str | None = None
    unrecoverable: bool = False


class _Flag:
    """A trio.Event for one job (`is_set`, `set`, `wait`) that makes no Event until
    a task waits on it: most jobs' flags are only set and read."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: trio.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if not self._set:
            self._set = True
            if self._event is not None:
                self._event.set()

    async def wait(self) -> None:
        if self._set:
            await trio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = trio.Event()
        await self._event.wait()


class RunningJob:
    """One claimed job while its handler runs."""

    def __init__(self, job: Job) -> None:
        assert job.lock_token is not None
        self.job = job
        self.token: str = job.lock_token
        self.scope = trio.CancelScope()
        self.settled = _Flag()  # the handler finished or an abort was asked
        self.done = _Flag()  # the handler's task is over
        self.outcome = Outcome()
        self.abort_reason: str | None = None
        self.ctx: JobContext | None = None
        # Lease renewals (see leases.py): when the next is due (trio time), the one
        # in flight, and whether they stopped (the job settled).
        self.renew_at = math.inf
        self.renewal: trio.CancelScope | None = None
        self.renewals_stopped = False
        self.lease_id, self.lease_token = job.id, self.token
        self.lease_state: JobState | None = None  # as the last renewal left it
        # Called once, when the job first settles (a job without an executor).
        self.on_settled: Callable[[], None] | None = None

    def stop_renewing(self) -> None:
        self.renew_at = math.inf
        self.renewals_stopped = True
        if self.renewal is not None:
            self.renewal.cancel()

    def abort(self, reason: str) -> None:
        """Ask the handler to stop; the first reason wins."""
        if self.abort_reason is None and not self.done.is_set():
            self.abort_reason = reason
            if self.ctx is not None:
                self.ctx.abort_reason = reason
            self._settle()

    def handler_done(self) -> None:
        self.done.set()
        self._settle()

    def _settle(self) -> None:
        if self.settled.is_set():
            return
        self.settled.set()
        if self.on_settled is not None:
            self.on_settled()


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, Exception) and not isinstance(exc, UnrecoverableError):
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text or type(exc).__name__


def _must_propagate(exc: BaseException) -> bool:
    if isinstance(exc, (trio.Cancelled, KeyboardInterrupt, SystemExit, GeneratorExit)):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(trio.Cancelled) is not None


class Worker:
    def __init__(
        self,
        queue: JobQueue,
        registry: HandlerRegistry,
        config: WorkerConfig | None = None,
        *,
        store: EventStore | None = None,
        governor: Governor | None = None,
        log: Callable[[str], None] | None = None,
        sweeps: Sequence[Sweep] = (),
    ) -> None:
        self.queue = queue
        self.store = store if store is not None else queue.store
        self.registry = registry
        self.sweeps = tuple(sweeps)
        self.config = config or WorkerConfig()
        self.governor = governor
        self.id = self.config.worker_id
        self.active: dict[str, RunningJob] = {}
        self.completed = 0
        self.failed = 0
        self._log = log or (lambda line: print(f"gormes worker: {line}", file=sys.stderr))
        self._stopping = trio.Event()
        self._stopped = trio.Event()
        self._first_beat_done = trio.Event()
        self._hurry = trio.Event()
        self.abandoned = 0
        self._capacity_changed = _Flag()
        self._idle_scope: trio.CancelScope | None = None
        self._handlers: trio.Nursery | None = None
        self._executors: trio.Nursery | None = None
        # Slots promised to claims in flight (the claim loop's or a completion
        # round's refill), so that the two never claim the same free slot.
        self._reserved = 0
        # Jobs finishing together are recorded in one transaction, which also
        # claims the jobs that take their slots (see `_Refill`).
        self._completions = Completions(queue, refill=_Refill(self), results=False)
        if governor is not None:
            governor.on_change(lambda _limit: self._wake_claimer())

    # -- public -----------------------------------------------------------------

    @property
    def limit(self) -> int:
        if self.governor is not None:
            return min(self.config.concurrency, self.governor.limit)
        return self.config.concurrency

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Stop claiming; in-flight jobs get `shutdown_grace_ms`, then are released."""
        self._stopping.set()
        self._wake_claimer()

    def hurry(self) -> None:
        """End the shutdown grace now: in-flight jobs are released at once."""
        self._hurry.set()
        self.stop()

    async def wait_stopped(self) -> None:
        """Until every claimed job is recorded or released (abandoned handlers aside)."""
        await self._stopped.wait()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        heartbeat = Heartbeat(self.store, self.id, self._describe_self)
        try:
            async with trio.open_nursery() as services:
                # The first beat commits with (or while) the first claim; the
                # stopped mark waits for it (`_say_stopped`).
                services.start_soon(self._first_beat, heartbeat)
                await services.start(self._watch_controls)
                services.start_soon(self._every, self.config.stall_interval_ms, self._sweep_stalled)
                services.start_soon(self._every, self.config.promote_interval_ms, self.queue.promote_delayed)
                services.start_soon(self._every, self.config.timeout_sweep_interval_ms, self.queue.sweep_timeouts)
                services.start_soon(self._every, self.config.unblock_interval_ms, self.queue.unblock_parents)
                services.start_soon(self._every, self.config.heartbeat_interval_ms, heartbeat.beat)
                for sweep in self.sweeps:
                    services.start_soon(self._every, sweep.interval_ms, sweep.run)
                services.start_soon(functools.partial(
                    keep_leases, self.active, self.config.lease_ms / 2000, self._renew_leases,
                    self._lease_refused, log=self._log,
                ))
                if self.governor is not None:
                    services.start_soon(self.governor.run, self._trip_breaker)
                async with trio.open_nursery() as handlers:
                    self._handlers = handlers
                    async with trio.open_nursery() as executors:
                        self._executors = executors
                        executors.start_soon(self._claim_loop, executors)
                        task_status.started(self)
                        await self._stopping.wait()
                        await self._drain()
                    await self._say_stopped(heartbeat)
                    # Handlers left now were abandoned: cancel them (an abandoned one
                    # that shields itself keeps this nursery open; see `abandoned`).
                    handlers.cancel_scope.cancel()
                services.cancel_scope.cancel()
        finally:
            await self._say_stopped(heartbeat)

    async def _first_beat(self, heartbeat: Heartbeat) -> None:
        try:
            with trio.CancelScope(shield=True):
                await heartbeat.beat()
        finally:
            self._first_beat_done.set()

    async def _say_stopped(self, heartbeat: Heartbeat) -> None:
        if self._stopped.is_set():
            return
        with trio.CancelScope(shield=True):
            await self._first_beat_done.wait()
            try:
                await heartbeat.stopped()
            except GormesError:
                pass
        self._stopped.set()

    # -- claiming ---------------------------------------------------------------

    def _wake_claimer(self) -> None:
        self._capacity_changed.set()
        self._capacity_changed = _Flag()
        if self._idle_scope is not None and self.stopping:
            self._idle_scope.cancel()

    async def _claim_loop(self, executors: trio.Nursery) -> None:
        names = self.registry.names()
        found_last_time = True
        while not self.stopping:
            free = self.limit - len(self.active) - self._reserved
            if free <= 0:
                await self._capacity_changed.wait()
                continue
            wanted = min(free, self.config.max_claims_per_round) if found_last_time else 1
            seen_head = await self.store.head()
            if self.stopping:
                break
            self._reserved += wanted
            try:
                jobs = await self._claim_some(names, wanted)
            finally:
                self._reserved -= wanted
            surplus = self._start(jobs)
            if surplus:
                await self._give_back(surplus)
            found_last_time = bool(jobs)
            if len(jobs) < wanted:
                await self._wait_for_new_events(seen_head)

    def _start(self, jobs: list[Job]) -> list[Job]:
        """Run the claimed `jobs` that fit under the limit; returns the surplus (the
        governor lowered the limit while the claim was in flight), which the
        caller gives back at once, without consuming an attempt."""
        room = max(0, self.limit - len(self.active))
        jobs, surplus = jobs[:room], jobs[room:]
        assert self._executors is not None
        for job in jobs:
            # Counted as active now, before its task starts, so the next
            # round never claims past the limit.
            run = self.active[job.id] = RunningJob(job)
            handler = self.registry.get(job.name)
            if handler is not None and not job.options.timeout_ms:
                run.on_settled = lambda run=run: self._settled(run)  # no executor
                self._launch(run, handler)
            else:
                self._executors.start_soon(self._execute, run)
        return surplus

    async def _give_back(self, jobs: list[Job]) -> None:
        for job in jobs:
            try:
                await self.queue.release(job.id, job.lock_token, "over the governed concurrency limit")
            except GormesError as exc:  # lost it already: its lease expires and it is requeued
                self._log(f"could not give back {job.id}: {exc}")

    async def _claim_some(self, names: list[str], wanted: int) -> list[Job]:
        claimed: list[Job] = []
        errors: list[BaseException] = []

        async def claim_one() -> None:
            try:
                job = await self.queue.claim(
                    names, self.config.queues, worker_id=self.id, lease_ms=self.config.lease_ms
                )
            except GormesError as exc:
                errors.append(exc)
                return
            if job is not None:
                claimed.append(job)

        claim_many = getattr(self.queue, "claim_many", None)
        if wanted > 1 and claim_many is not None:  # one transaction for the whole round
            try:
                claimed = list(await claim_many(
                    names, self.config.queues, worker_id=self.id,
                    lease_ms=self.config.lease_ms, limit=wanted,
                ))
            except GormesError as exc:
                errors.append(exc)
        elif wanted == 1:
            await claim_one()
        else:
            async with trio.open_nursery() as nursery:
                for _ in range(wanted):
                    nursery.start_soon(claim_one)
        if errors and not claimed:
            self._log(f"claim failed: {errors[0]}; retrying")
            await trio.sleep(0.1)
        return claimed

    async def _wait_for_new_events(self, seen_head: int) -> None:
        """Until an event is appended after `seen_head` (anywhere), or we stop.

        Waiting on the head position rather than the bare change counter keeps
        a worker's own empty claims (transactions that append nothing) from
        waking it again.
        """
        with trio.CancelScope() as scope:
            self._idle_scope = scope
            if self.stopping:
                scope.cancel()
            try:
                while True:
                    generation = self.store.generation
                    if await self.store.head() > seen_head:
                        return
                    if self.limit - len(self.active) <= 0:
                        return
                    await self.store.wait_for_change(generation)
            finally:
                self._idle_scope = None

    # -- running one job --------------------------------------------------------

    def _launch(self, run: RunningJob, handler: Handler) -> None:
        """Start the job's handler (its lease renewed from now on)."""
        run.ctx = JobContext(self.queue, run.job, on_lock_lost=lambda: run.abort(LEASE_LOST))
        run.renew_at = trio.current_time() + self.config.lease_ms / 2000
        assert self._handlers is not None
        self._handlers.start_soon(self._run_handler, run, handler)

    async def _execute(self, run: RunningJob) -> None:
        """A job with a timeout (or no handler here): wait for it to settle or
        time out, then record what happened."""
        job = run.job
        try:
            handler = self.registry.get(job.name)
            if handler is None:  # pragma: no cover - we claim only names we have
                await self.queue.release(job.id, run.token, f"no handler for {job.name!r}")
                return
            self._launch(run, handler)
            timeout_ms = job.options.timeout_ms
            if timeout_ms:
                with trio.move_on_after(timeout_ms / 1000):
                    await run.settled.wait()
            else:
                await run.settled.wait()
            if not run.done.is_set():
                run.abort(TIMEOUT)
            await self._finish(run)
        finally:
            self._free(run)

    def _settled(self, run: RunningJob) -> None:
        """A job without an executor settled: a handler that returned joins the
        next round of completions (`_completed` frees its slot once written);
        anything else is recorded by a task of its own, as the executor would."""
        if run.done.is_set() and run.abort_reason is None and run.outcome.ok:
            run.stop_renewing()
            self._in_a_nursery(lambda nursery: self._completions.submit(
                run.job.id, run.token, run.outcome.result,
                lambda outcome: self._completed(run, outcome), nursery,
            ))
        else:
            self._spawn(self._finish_and_free, run)

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        self._in_a_nursery(lambda nursery: nursery.start_soon(fn, *args))

    def _in_a_nursery(self, start: Callable[[trio.Nursery], None]) -> None:
        """`start(nursery)` with the executors' nursery, or the handlers' once the
        executors' is closed (shutting down)."""
        assert self._executors is not None and self._handlers is not None
        try:
            start(self._executors)
        except RuntimeError:  # pragma: no cover - the executors are done: shutting down
            start(self._handlers)

    async def _finish_and_free(self, run: RunningJob) -> None:
        try:
            await self._finish(run)
        finally:
            self._free(run)

    async def _finish(self, run: RunningJob) -> None:
        """The job settled: wait out the abort grace of a handler that did not
        finish (it was asked to stop), then record what happened."""
        if not run.done.is_set():
            run.scope.cancel()
            with trio.move_on_after(self.config.abort_grace_ms / 1000):
                await run.done.wait()
        run.stop_renewing()
        with trio.CancelScope(shield=True):
            await self._record(run)

    def _free(self, run: RunningJob) -> None:
        run.stop_renewing()
        if self.active.get(run.job.id) is run:  # (a refill may have removed it already)
            del self.active[run.job.id]
        self._wake_claimer()

    def _completed(self, run: RunningJob, outcome: Any) -> None:
        """The round holding a job without an executor was written: what `_complete`
        does with `complete`'s answer, without a task waiting for it."""
        if isinstance(outcome, InvalidJob):  # the result is not JSON: the handler's fault
            self._spawn(self._fail_invalid_result, run, str(outcome))
            return
        if not isinstance(outcome, BaseException):
            self.completed += 1
        elif not isinstance(outcome, (LockLost, InvalidTransition, JobNotFound)):
            # (those: we no longer hold the job, nothing of ours may change it)
            self._log(f"job {run.job.id}: could not record the outcome: {outcome}")
        self._free(run)

    async def _fail_invalid_result(self, run: RunningJob, error: str) -> None:
        try:
            with trio.CancelScope(shield=True):
                try:
                    await self.queue.fail(run.job.id, run.token, error, unrecoverable=True)
                except (LockLost, InvalidTransition, JobNotFound):
                    pass
                except GormesError as exc:
                    self._log(f"job {run.job.id}: could not record the outcome: {exc}")
                else:
                    self.failed += 1
        finally:
            self._free(run)

    async def _run_handler(self, run: RunningJob, handler: Handler) -> None:
        assert run.ctx is not None
        try:
            with run.scope:
                try:
                    result = await handler(run.ctx, run.job.data)
                except BaseException as exc:
                    if _must_propagate(exc):
                        raise
                    run.outcome = Outcome(
                        finished=True, error=_describe(exc),
                        unrecoverable=isinstance(exc, UnrecoverableError),
                    )
                else:
                    run.outcome = Outcome(finished=True, ok=True, result=result)
        finally:
            run.handler_done()

    async def _record(self, run: RunningJob) -> None:
        """Write what happened; a stale holder's write is refused and ignored."""
        job_id, token, reason = run.job.id, run.token, run.abort_reason
        abandoned = not run.done.is_set()
        if abandoned:
            self.abandoned += 1
            self._log(f"job {job_id}: {IGNORED_ABORT} ({reason}); abandoned")
        try:
            if reason is None:
                if run.outcome.ok:
                    await self._complete(run)
                else:
                    await self.queue.fail(
                        job_id, token, run.outcome.error or "failed",
                        unrecoverable=run.outcome.unrecoverable,
                    )
                    self.failed += 1
            elif reason in (TIMEOUT, BREAKER) and abandoned:
                await self.queue.time_out(job_id, token, IGNORED_ABORT)
            elif reason == TIMEOUT:
                await self.queue.time_out(job_id, token, TIMEOUT_EXCEEDED)
            elif reason == BREAKER:
                await self.queue.fail(job_id, token, BREAKER_ERROR, unrecoverable=True)
            elif reason == SHUTDOWN:
                await self.queue.release(job_id, token, "worker shutdown")
            # paused, cancelled, lease lost: already recorded by whoever did it.
        except (LockLost, InvalidTransition, JobNotFound):
            pass  # we no longer hold the job: nothing of ours may change it
        except GormesError as exc:
            self._log(f"job {job_id}: could not record the outcome: {exc}")

    async def _complete(self, run: RunningJob) -> None:
        try:
            await self._completions.complete(run.job.id, run.token, run.outcome.result)
        except InvalidJob as exc:  # the result is not JSON: the handler's fault
            await self.queue.fail(run.job.id, run.token, str(exc), unrecoverable=True)
            self.failed += 1
        else:
            self.completed += 1

    async def _renew_leases(self, runs: Sequence[RunningJob]) -> list[JobState | None]:
        """The leases of every job due (the lease keeper calls this every lease/2
        with all of them): one transaction (leases.py). Each job's renewal starts
        from the newer of its last renewal's state and the one its claim or its
        holder's last write left in the queue: a first renewal then reads only what
        was appended since (an agent job's turns), not the job's whole stream."""
        states = (_newer(r.lease_state, self.queue.kept_state(r.job.id)) for r in runs)
        known = [state for state in states if state is not None]
        return await renew_leases(
            self.store, self.queue.now_ms, [(r.job.id, r.token) for r in runs], self.config.lease_ms, known,
        )

    async def _lease_refused(self, run: RunningJob) -> bool:
        """A refused renewal is re-checked once before giving up, which aborts the
        handler: True if the job's lease was renewed after all."""
        lease_ms = self.config.lease_ms
        # One re-check: a transient failure (busy database) is not a lost lease.
        if await self._still_ours(run) and await self._renewed(run, lease_ms):
            return True
        run.abort(await self._loss_reason(run))
        run.scope.cancel()
        return False

    async def _renewed(self, run: RunningJob, lease_ms: int) -> bool:
        try:
            return await self.queue.renew(run.job.id, run.token, lease_ms)
        except GormesError as exc:
            self._log(f"job {run.job.id}: lease renewal failed: {exc}")
            return False

    async def _still_ours(self, run: RunningJob) -> bool:
        try:
            job = await self.queue.get(run.job.id)
        except GormesError:
            return True  # cannot tell: keep going, the next renewal decides
        return job is not None and job.status == "active" and job.lock_token == run.token

    async def _loss_reason(self, run: RunningJob) -> str:
        try:
            job = await self.queue.get(run.job.id)
        except GormesError:
            return LEASE_LOST
        if job is not None and job.status == "paused":
            return PAUSED
        if job is not None and job.status == "cancelled":
            return CANCELLED
        return LEASE_LOST

    # -- watching for pause, cancel and lost leases --------------------------------

    async def _watch_controls(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        head = await self.store.head()
        task_status.started()
        async for record in self.store.subscribe(after=head, types=CONTROL_TYPES):
            job_id = record.stream.removeprefix("job-")
            run = self.active.get(job_id)
            if run is None or run.done.is_set():
                continue
            if await self._still_ours(run):
                continue  # an older event of this job (before our claim)
            run.abort(await self._loss_reason(run))
            run.scope.cancel()

    # -- shutdown, breaker, sweeps ----------------------------------------------

    async def _drain(self) -> None:
        async def all_done(cancel: trio.CancelScope) -> None:
            while self.active:
                await self._capacity_changed.wait()
            cancel.cancel()

        async def hurried(cancel: trio.CancelScope) -> None:
            await self._hurry.wait()
            cancel.cancel()

        with trio.move_on_after(self.config.shutdown_grace_ms / 1000):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(all_done, nursery.cancel_scope)
                nursery.start_soon(hurried, nursery.cancel_scope)
        for run in list(self.active.values()):
            run.abort(SHUTDOWN)
            run.scope.cancel()

    async def _trip_breaker(self) -> None:
        """Cancel the lowest-priority active job (highest number; newest on ties)."""
        candidates = [r for r in self.active.values() if r.abort_reason is None and not r.done.is_set()]
        if not candidates:
            return
        victim = max(candidates, key=lambda r: (r.job.priority, r.job.created_at, r.job.id))
        self._log(f"job {victim.job.id}: {BREAKER_ERROR}")
        victim.abort(BREAKER)
        victim.scope.cancel()

    async def _sweep_stalled(self) -> Any:
        return await self.queue.sweep_stalled(grace_ms=self.config.stall_grace_ms)

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[Any]]) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            try:
                await fn()
            except GormesError as exc:
                self._log(f"{getattr(fn, '__name__', 'sweep')} failed: {exc}")
            except Exception:  # noqa: BLE001 - a sweep bug must not kill the worker
                self._log("sweep crashed:\n" + traceback.format_exc())

    def _describe_self(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "queues": list(self.config.queues) if self.config.queues else None,
            "names": self.registry.names(),
            "concurrency": self.config.concurrency,
            "active": len(self.active),
            "governor": self._governor_state(),
        }

    def _governor_state(self) -> dict[str, Any] | None:
        # its limit, load, thresholds, last reason and recent changes (governor.py)
        return None if self.governor is None else self.governor.report()


class _Refill:
    """A completion round claims the jobs for the slots its items free, in the
    same transaction (`Completions`, `JobQueue.complete_and_claim`)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def reserve(self, items: list[tuple[str, str, Any]]) -> dict[str, Any] | None:
        w = self.worker
        if w.stopping or w._executors is None:
            return None
        freed = sum(1 for job_id, token, _ in items if _holds(w, job_id, token))
        free = w.limit - len(w.active) - w._reserved + freed
        want = min(free, w.config.max_claims_per_round)
        if want <= 0:
            return None
        w._reserved += want
        return {
            "names": w.registry.names(), "queues": w.config.queues, "worker_id": w.id,
            "lease_ms": w.config.lease_ms, "limit": want,
        }

    def claimed(
        self, claim: dict[str, Any], items: list[tuple[str, str, Any]], outcomes: list[Any],
        jobs: list[Job],
    ) -> None:
        w = self.worker
        w._reserved -= claim["limit"]
        # The round's jobs are recorded (or no longer ours): their slots are free
        # now, before their executors wake. One whose result was not JSON keeps
        # its slot: its executor records a failure for it next.
        for (job_id, token, _), outcome in zip(items, outcomes):
            if not isinstance(outcome, InvalidJob) and _holds(w, job_id, token):
                del w.active[job_id]
        surplus = w._start(jobs)
        if surplus:
            assert w._executors is not None
            w._executors.start_soon(w._give_back, surplus)


def _holds(worker: Worker, job_id: str, token: str) -> bool:
    run = worker.active.get(job_id)
    return run is not None and run.token == token


def _newer(a: JobState | None, b: JobState | None) -> JobState | None:
    """The later of two states of one job (by its stream's version)."""
    if a is None or (b is not None and b.version > a.version):
        return b
    return a
