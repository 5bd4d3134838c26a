"""Group completion: concurrent `complete` calls share one `complete_many` transaction.

The worker finishes many jobs at once. Instead of one transaction each, the
first caller of a round leads it: it lets every other caller that is ready in
the same scheduler pass join (one checkpoint), waits until the previous round's
write is done (meanwhile more callers join its round), then writes the whole
round with `queue.complete_many` and hands every caller its own outcome, exactly
what `queue.complete` would have returned or raised for it. If the round's
transaction fails as a whole, each of its items is written alone, so each
caller still gets `complete`'s own answer.

    completions = Completions(queue)
    job = await completions.complete(job_id, token, result)

With a `refill` (the worker), a round also claims new jobs for the slots its
items free, in the same transaction (`queue.complete_and_claim`): the leader
asks `refill.reserve(items)` for the claim's arguments before writing and gives
every outcome and the claimed jobs to `refill.claimed(...)` once written (or
nothing claimed, if the round failed), before any caller of the round wakes.

With `results=False` a caller whose job was completed gets None instead of the
Job (refusals are raised all the same): the ledger rows are not read back for a
caller that does not look at them (the worker).

`submit` is `complete` without waiting: the item joins the round at once and
`done(outcome)` is called once the round is written (the Job or None, or the
exception `complete` would have raised for it), in the round's writing task and
right after `refill.claimed`. The first item of a round then starts the round's
writing task in the nursery given. The worker completes this way: a finished
job costs it no task of its own waiting on the round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio

from gormes.actors.jobs.views import Job
from gormes.errors import StoreError

if TYPE_CHECKING:
    from gormes.actors.jobs.queue import JobQueue

Item = tuple[str, str, Any]


class Refill(Protocol):
    def reserve(self, items: list[Item]) -> dict[str, Any] | None:
        """`complete_and_claim`'s claim arguments (names, queues, worker_id,
        lease_ms, limit) for a round of `items`, or None to claim nothing."""

    def claimed(
        self, claim: dict[str, Any], items: list[Item], outcomes: list[Any], jobs: list[Job]
    ) -> None:
        """After the round: `jobs` were claimed with `claim` (none if it failed)."""


Done = Callable[[Any], None]


class _Round:
    __slots__ = ("callbacks", "done", "items", "outcomes")

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.callbacks: list[Done | None] = []  # per item: `submit`'s, or None (`complete`)
        self.outcomes: list[Any] = []
        self.done = trio.Event()


class Completions:
    def __init__(self, queue: JobQueue, refill: Refill | None = None, *, results: bool = True) -> None:
        self.queue = queue
        self._combined = getattr(queue, "complete_and_claim", None) is not None
        self.refill = refill if self._combined else None
        self.results = results
        self.rounds_written = 0
        self._round = _Round()
        self._writing = trio.Lock()

    async def complete(self, job_id: str, token: str, result: Any = None) -> Job | None:
        """`queue.complete(job_id, token, result)`, written together with others."""
        if getattr(self.queue, "complete_many", None) is None:
            return await self.queue.complete(job_id, token, result)
        round_ = self._round
        index = len(round_.items)
        round_.items.append((job_id, token, result))
        round_.callbacks.append(None)
        if index == 0:
            await self._lead(round_)
        else:
            await round_.done.wait()
        outcome = _outcome(round_, index)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def submit(
        self, job_id: str, token: str, result: Any, done: Done, nursery: trio.Nursery
    ) -> None:
        """`complete(job_id, token, result)` without waiting: `done(outcome)` is
        called once it is written, with what `complete` would have returned or
        raised. A round's first item starts its writing task in `nursery`."""
        if getattr(self.queue, "complete_many", None) is None:
            nursery.start_soon(self._one, (job_id, token, result), done)
            return
        round_ = self._round
        if not round_.items:  # (first: if the nursery refuses, nothing was added)
            nursery.start_soon(self._lead, round_)
        round_.items.append((job_id, token, result))
        round_.callbacks.append(done)

    async def _one(self, item: Item, done: Done) -> None:
        with trio.CancelScope(shield=True):
            done(await self._alone(item))

    async def _lead(self, round_: _Round) -> None:
        # The leader writes even if cancelled meanwhile: the others wait on it.
        with trio.CancelScope(shield=True):
            # Jobs that finish together finish in the same scheduler pass: let
            # the others of this pass join before the round can be taken.
            await trio.lowlevel.checkpoint()
            async with self._writing:
                if self._round is round_:
                    self._round = _Round()
                await self._write(round_)

    async def _write(self, round_: _Round) -> None:
        items = round_.items
        claim = self.refill.reserve(items) if self.refill is not None else None
        jobs: list[Job] = []
        try:
            if not self._combined or (claim is None and self.results):
                round_.outcomes = list(await self.queue.complete_many(items))
            else:
                outcomes, jobs = await self.queue.complete_and_claim(
                    items, **(claim or {"names": ()}), rows=self.results
                )
                round_.outcomes = list(outcomes)
        except Exception:  # noqa: BLE001 - each item gets its own answer below
            round_.outcomes = [await self._alone(item) for item in items]
        finally:
            self.rounds_written += 1
            if claim is not None:
                assert self.refill is not None
                self.refill.claimed(claim, items, round_.outcomes, jobs)
            for index, done in enumerate(round_.callbacks):
                if done is not None:
                    done(_outcome(round_, index))
            round_.done.set()

    async def _alone(self, item: Item) -> Any:
        try:
            job = await self.queue.complete(*item)
        except Exception as exc:  # noqa: BLE001 - handed to its caller, who raises it
            return exc
        return job if self.results else None


def _outcome(round_: _Round, index: int) -> Any:
    """The item's outcome once its round is written (an exception: its refusal)."""
    if index >= len(round_.outcomes):
        job_id = round_.items[index][0]
        return StoreError(f"the completion of job {job_id} was not recorded")
    return round_.outcomes[index]
