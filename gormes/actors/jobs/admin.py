"""Operator commands and sweeps of the job queue (mixed into `JobQueue`).

Each method is one read-decide-append transaction through `JobQueue._transact`;
see gormes/actors/jobs/queue.py for the whole picture.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from gormes.actors.jobs import rules
from gormes.actors.jobs.session import JobSession, new_id
from gormes.actors.jobs.views import MESSAGE_COLUMNS, InboxMessage, Job, PruneResult, message_from_row
from gormes.actors.jobs.state import InvalidJob, InvalidTransition, JobNotFound
from gormes.events.job_machine import HELD, PROMOTABLE, TERMINAL
from gormes.projections.ledger import status_in

SWEEP_LIMIT = 500  # jobs handled per sweep transaction
DEFAULT_STALL_GRACE_MS = 15_000
plain = msgspec.json.Decoder()  # JSON text -> plain values (dict, list, str, ...)
_TERMINAL, _HELD, _PROMOTABLE = status_in(TERMINAL), status_in(HELD), status_in(PROMOTABLE)


def json_data(data: Any, what: str = "job data") -> Any:
    """Refuse data that is not JSON; return it as plain JSON values."""
    try:
        return plain.decode(msgspec.json.encode(data))
    except (TypeError, msgspec.EncodeError, OverflowError) as exc:
        raise InvalidJob(f"{what} is not JSON: {exc}") from None


def deep_merge(base: Any, overrides: Any) -> Any:
    if isinstance(base, dict) and isinstance(overrides, dict):
        merged = dict(base)
        for key, value in overrides.items():
            merged[key] = deep_merge(base.get(key), value) if key in base else value
        return merged
    return overrides if overrides is not None else base



class QueueAdmin:
    """Operators' commands (pause, resume, retry, cancel, send, replay, prune) and
    the periodic sweeps (stalled, delayed, timeouts, stranded parents)."""

    if TYPE_CHECKING:  # provided by JobQueue
        async def _transact(self, fn: Callable[[JobSession], Any], now: int | None = None) -> Any: ...
        @staticmethod
        def _job(s: JobSession, job_id: str, *, coalesced: bool = False) -> Job: ...
        @staticmethod
        def _existing(s: JobSession, job_id: str) -> None: ...
        def _submit(self, s: JobSession, name: str, data: Any, opts: Any, replay_of: str | None,
                    *, submitter: Any = None) -> Job: ...

    # -- operators -------------------------------------------------------------

    async def _operator_command(self, job_id: str, make: Callable[[int], rules.Command]) -> Job:
        def run(s: JobSession) -> Job:
            self._existing(s, job_id)
            s.run(job_id, make(s.now))
            return self._job(s, job_id)

        return await self._transact(run)

    async def pause(self, job_id: str) -> Job:
        """waiting, delayed or active -> paused (progress kept). Other states: `InvalidTransition`."""
        return await self._operator_command(job_id, lambda now: rules.Pause(now=now))

    async def resume(self, job_id: str) -> Job:
        """paused -> waiting."""
        return await self._operator_command(job_id, lambda now: rules.Resume(now=now))

    async def retry(self, job_id: str) -> Job:
        """failed or dead -> waiting, resetting attempts, error, started_at, stalled_counter."""
        return await self._operator_command(job_id, lambda now: rules.Retry(now=now))

    async def cancel(self, job_id: str) -> list[str]:
        """Cancel the job and every non-terminal descendant; returns the ids cancelled."""
        def cancel(s: JobSession) -> list[str]:
            self._existing(s, job_id)
            s.run(job_id, rules.Cancel(now=s.now))
            done = [job_id]
            descendants = s.ids_where(
                "WITH RECURSIVE d(id, depth) AS (SELECT id, 1 FROM jobs WHERE parent_id = ?"
                " UNION SELECT j.id, d.depth + 1 FROM jobs j JOIN d ON j.parent_id = d.id)"
                " SELECT id FROM d ORDER BY depth, id", (job_id,),
            )
            for child in descendants:
                state = s.state(child)
                if state is not None and not state.terminal:
                    s.run(child, rules.Cancel(now=s.now, reason="cancelled with its parent"))
                    done.append(child)
            return done

        return await self._transact(cancel)

    async def send(self, job_id: str, payload: Any, sender: str = "operator") -> InboxMessage:
        """Put a message in a non-terminal job's inbox. `sender` is "operator" or
        the job's parent id; anyone else is refused."""
        payload = json_data(payload, "message payload")

        def send(s: JobSession) -> InboxMessage:
            self._existing(s, job_id)
            message_id = new_id()
            s.run(job_id, rules.SendMessage(
                now=s.now, message_id=message_id, sender=sender, payload=payload
            ))
            row = s.rows(f"SELECT {MESSAGE_COLUMNS} FROM inbox WHERE id = ?", (message_id,))[0]
            return message_from_row(row)

        return await self._transact(send)

    async def replay(self, job_id: str, data_overrides: Any = None) -> Job:
        """A terminal job -> a new job with the same name, queue, priority, options and
        submitter (a replay never widens whose work it is), data deep-merged with
        `data_overrides`, no parent (and no idempotency key, no debounce)."""
        overrides = json_data(data_overrides, "replay data")

        def replay(s: JobSession) -> Job:
            state = s.state(job_id)
            if state is None:
                raise JobNotFound(f"no job {job_id}")
            if not state.terminal:
                raise InvalidTransition(f"cannot replay job {job_id}: it is {state.status}")
            # Not debounced again: the job's data is what its submissions left it.
            opts = msgspec.structs.replace(
                state.options, parent_id=None, idempotency_key=None, delay_ms=0,
                debounce_key=None, debounce_ms=None, debounce_mode="last", debounce_max_ms=None,
            )
            data = deep_merge(state.data, overrides)
            return self._submit(s, state.name, data, opts, replay_of=job_id, submitter=state.submitter)

        return await self._transact(replay)

    async def prune(self, older_than_ms: int, *, dry_run: bool = False) -> PruneResult:
        """Remove terminal jobs that finished more than `older_than_ms` ago from the
        ledger (their streams stay in the log)."""
        if older_than_ms < 0:
            raise InvalidJob("older_than must not be negative")

        def prune(s: JobSession) -> PruneResult:
            ids = s.ids_where(
                f"SELECT id FROM jobs WHERE {_TERMINAL} AND finished_at < ?"
                " ORDER BY finished_at, id", (s.now - older_than_ms,),
            )
            if not dry_run:
                for job_id in ids:
                    s.run(job_id, rules.Prune(now=s.now))
            return PruneResult(ids=ids, dry_run=dry_run)

        return await self._transact(prune)

    # -- sweeps (the worker runs these periodically) ------------------------------

    async def _sweep(
        self, now: int | None, select: Callable[[JobSession], list[str]],
        make: Callable[[int], rules.Command],
    ) -> list[str]:
        def sweep(s: JobSession) -> list[str]:
            return [job_id for job_id in select(s) if s.run(job_id, make(s.now))]

        return await self._transact(sweep, now)

    async def sweep_stalled(
        self, now: int | None = None, grace_ms: int = DEFAULT_STALL_GRACE_MS
    ) -> list[str]:
        """Requeue (or kill at max_stalled) active jobs whose lease expired more
        than `grace_ms` ago. Returns the ids handled."""
        return await self._sweep(
            now,
            lambda s: s.ids_where(
                f"SELECT id FROM jobs WHERE {_HELD}"
                " AND lock_until IS NOT NULL AND lock_until + ? < ? LIMIT ?",
                (grace_ms, s.now, SWEEP_LIMIT),
            ),
            lambda now: rules.CheckStall(now=now, grace_ms=grace_ms),
        )

    async def promote_delayed(self, now: int | None = None) -> list[str]:
        return await self._transact(promote_due, now)

    async def sweep_timeouts(self, now: int | None = None) -> list[str]:
        """Kill jobs active past twice their `timeout_ms` whose lease is still held:
        the backstop for a holder whose own timeout did not fire. A job without a
        timeout runs as long as its lease is renewed (a long agent job is not a hung
        one), and a job whose lease lapsed is the stall sweep's, which requeues it:
        its worker is gone, so the job is not at fault (decision 0054)."""
        return await self._sweep(
            now,
            lambda s: s.ids_where(
                "SELECT id FROM jobs WHERE status = 'active' AND timeout_ms IS NOT NULL"
                " AND claimed_at + 2 * timeout_ms < ? AND lock_until >= ? LIMIT ?",
                (s.now, s.now, SWEEP_LIMIT),
            ),
            lambda now: rules.TimeOut(now=now, token=None, error="timeout exceeded"),
        )

    async def unblock_parents(self) -> list[str]:
        """Return to waiting any parent stranded in waiting-children with no live child."""
        return await self._sweep(
            None,
            lambda s: s.ids_where(
                "SELECT id FROM jobs WHERE status = 'waiting-children' AND live_children = 0"
                " LIMIT ?", (SWEEP_LIMIT,),
            ),
            lambda now: rules.Settle(now=now),
        )


def promote_due(s: JobSession) -> list[str]:
    """Promote the delayed jobs whose delay is over (up to SWEEP_LIMIT), in the
    session's transaction: the sweep's, and every claim's first step."""
    due = s.ids_where(
        f"SELECT id FROM jobs WHERE {_PROMOTABLE} AND delay_until <= ?"
        " ORDER BY delay_until LIMIT ?", (s.now, SWEEP_LIMIT),
    )
    return [job_id for job_id in due if s.run(job_id, rules.Promote(now=s.now))]
