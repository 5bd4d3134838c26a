"""Cron over the event store: the operator's commands (`CronBook`) and the
scheduler task that enqueues each due fire exactly once (`CronScheduler`).

Exactly once, across restarts and with several schedulers on one database: a
fire is one store transaction (BEGIN IMMEDIATE, so it holds the database write
lock) that folds the schedule's stream, checks with the pure rules that this
fire time is still due and not yet fired, submits the job through the queue
(idempotency key = schedule name + fire time, submitter `system` /
`cron:<name>`), appends `cron.fired` with the expected version and the
`job.submit` audit event, sealed onto the day's chain. The audit is written here
rather than by the executor because the executor's job.submit would commit in a
transaction of its own, and the fire would no longer be atomic (decision 0019).
Only the operator may add a schedule (the cron.* operations). A scheduler that
comes second, in this process or another, folds a stream that already holds the
fire and does nothing. The in-memory view of the schedules is only for knowing
when to look; every decision is made again on the stream itself.

    scheduler = CronScheduler(queue)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
"""

from __future__ import annotations

import builtins
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from gormes.actors.actor import State, fold
from gormes.actors.cron.actor import CRON
from gormes.actors.jobs import rules as job_rules
from gormes.actors.cron.rules import (
    Add,
    Command,
    Fire,
    Pause,
    Remove,
    Resume,
    ScheduleNotFound,
    ScheduleState,
    due_fire,
    fire_key,
    next_due,
    parse_expression,
    validate_name,
)
from gormes.actors.runtime import ask, execute, load, read
from gormes.actors.jobs.queue import JobQueue
from gormes.events.audit_chain import seal
from gormes.errors import GormesError
from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.cron import CRON_STREAM_PREFIX
from gormes.events.jobs import JobOptions, Submitter
from gormes.events.store import EventStore, Transaction
from gormes.projections.cron import read_rows, schedules
from gormes.projections.runner import ProjectionRunner

log = logging.getLogger("gormes.cron")

TRUST = "system"


_canonical = msgspec.json.Encoder(order="deterministic")


class _SubmitInput(msgspec.Struct, kw_only=True):
    """The shape of job.submit's input (gormes/tools/jobs.py), which actors may not import."""

    name: str
    data: Any = None
    options: JobOptions | None = None


def submit_digest(job: str, data: Any, options: JobOptions) -> str:
    """sha256 of the job.submit input a fire amounts to, as the executor digests it."""
    return hashlib.sha256(_canonical.encode(_SubmitInput(name=job, data=data, options=options))).hexdigest()


class CronFireResult(msgspec.Struct, frozen=True):
    name: str
    fire_at: int
    job_id: str
    coalesced: bool


class CronBook:
    """Add, pause, resume, remove and read schedules (each command one transaction)."""

    def __init__(self, store: EventStore, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    async def add(
        self, name: str, schedule: str, job: str, data: Any = None, queue: str = "default"
    ) -> ScheduleState:
        validate_name(name)
        expr = parse_expression(schedule)
        job_rules.validate_options(JobOptions(queue=queue))
        return await self._run(name, lambda at: Add(
            name=name, schedule=expr, job=job, data=data, queue=queue, at=at,
        ))

    async def pause(self, name: str) -> ScheduleState:
        return await self._run(name, lambda at: Pause(name, at))

    async def resume(self, name: str) -> ScheduleState:
        return await self._run(name, lambda at: Resume(name, at))

    async def remove(self, name: str) -> ScheduleState:
        return await self._run(name, lambda at: Remove(name, at))

    async def get(self, name: str) -> ScheduleState:
        state = (await read(self.store, CRON, name)).value
        if state is None or not state.live:
            raise ScheduleNotFound(f"no schedule named {name!r}")
        return state

    async def list(self) -> builtins.list[ScheduleState]:
        """Every live schedule by name, from the `schedules` projection (caught up first)."""
        await ProjectionRunner(self.store, schedules).catch_up()
        rows = await self.store.read_sql(read_rows)
        return [
            ScheduleState(
                name=r["name"], schedule=r["schedule"], job=r["job"], data=r["data"],
                queue=r["queue"], status=r["status"], created_at=r["created_at"],
                counts_from=r["counts_from"], last_fire_at=r["last_fire_at"],
                last_job_id=r["last_job_id"], fires=r["fires"],
            )
            for r in rows
        ]

    async def _run(self, name: str, make: Callable[[int], Command]) -> ScheduleState:
        at = int(self.clock() * 1000)
        _, state = await ask(self.store, CRON, name, make(at))
        assert state.value is not None
        return state.value


class CronScheduler:
    """Watches the `cron.*` events and fires due schedules through `queue`."""

    def __init__(
        self,
        queue: JobQueue,
        *,
        clock: Callable[[], float] = time.time,
        scheduler_id: str = "cron",
        max_sleep_s: float = 30.0,
    ) -> None:
        self.queue = queue
        self.store = queue.store
        self.clock = clock
        self.id = scheduler_id
        self.max_sleep_s = max_sleep_s
        self.states: dict[str, ScheduleState] = {}
        self.fired = 0
        self._seen = 0  # the last log position folded into `states`

    def _now(self) -> int:
        return int(self.clock() * 1000)

    async def refresh(self) -> None:
        """Fold `cron.*` events appended since the last look into `states`."""
        while True:
            records = await self.store.read_all(self._seen, 1000, ("cron.*",))
            if not records:
                return
            for r in records:
                if r.stream.startswith(CRON_STREAM_PREFIX):
                    name = r.stream[len(CRON_STREAM_PREFIX):]
                    # The state before this record is the one kept (what came between
                    # on the stream, not cron.*, changes nothing), at the version before it.
                    state = fold(CRON, [r.event], State(r.version - 1, self.states.get(name))).value
                    if state is not None:
                        self.states[name] = state
                self._seen = r.position

    async def tick(self) -> list[CronFireResult]:
        """Fire every schedule that is due now; return what this scheduler fired."""
        await self.refresh()
        now = self._now()
        results = []
        for name, state in sorted(self.states.items()):
            fire_at = due_fire(state, now)
            if fire_at is None:
                continue
            try:
                result = await self.fire(name, fire_at, now)
            except GormesError as exc:
                log.error("schedule %s: fire at %s failed: %s", name, fire_key(name, fire_at), exc)
                continue
            if result is not None:
                results.append(result)
                self.fired += 1
                log.info("schedule %s fired job %s (%s)%s", name, result.job_id,
                         fire_key(name, fire_at), " (coalesced)" if result.coalesced else "")
        await self.refresh()
        return results

    async def fire(self, name: str, fire_at: int, now: int) -> CronFireResult | None:
        """Decide and enqueue one fire in one transaction; None if it is not (or no
        longer) due: fired already by anyone, paused, removed."""
        queue, scheduler = self.queue, self.id

        def fire(tx: Transaction) -> CronFireResult | None:
            current = load(tx, CRON, name)
            state = current.value
            if state is None or due_fire(state, now) != fire_at:
                return None
            options = JobOptions(queue=state.queue, idempotency_key=fire_key(name, fire_at))
            caller = f"cron:{name}"
            # The queue's own submit, inside this transaction (JobQueue.submit would
            # open a second one and the decision could no longer be atomic).
            job = queue.submit_in(tx, now, state.job, state.data, options,
                                  submitter=Submitter(trust=TRUST, caller=caller))
            execute(tx, CRON, name, Fire(
                fire_at=fire_at, job_id=job.id, coalesced=job.coalesced, scheduler=scheduler,
                at=now,
            ), current)
            seal(tx, audit_stream(now), [OperationAudited(
                operation="job.submit", audit_kind="job.write", caller=caller,
                trust=TRUST, job_id=job.id, allowed=True, outcome="ok", duration_ms=0.0,
                input_sha256=submit_digest(state.job, state.data, options), mutating=True, at=now,
            )])
            return CronFireResult(name=name, fire_at=fire_at, job_id=job.id, coalesced=job.coalesced)

        return await self.store.transact(fire)

    def next_wake(self, now: int) -> int | None:
        wakes = [w for w in (next_due(s, now) for s in self.states.values()) if w is not None]
        return min(wakes) if wakes else None

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Fire due schedules until cancelled; wake for the next fire time or when
        a schedule changes (any log growth triggers a cheap re-read)."""
        await self.refresh()
        task_status.started()
        while True:
            generation = self.store.generation
            try:
                await self.tick()
            except GormesError as exc:
                log.error("cron tick failed: %s", exc)
            now = self._now()
            wake = self.next_wake(now)
            delay = self.max_sleep_s if wake is None else min(self.max_sleep_s, (wake - now) / 1000)
            with trio.move_on_after(max(0.0, delay) + 0.005):
                await self.store.wait_for_change(generation)
                # A busy log wakes us often; a schedule change needs no faster answer.
                await trio.sleep(0.1)
