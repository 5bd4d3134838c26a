"""Group completion: concurrent `complete` calls share one `complete_many` transaction.

The worker finishes many jobs at once. Instead of one transaction each, the
first caller of a round leads it: it waits until the previous round's write is
done (meanwhile more callers join its round), then writes the whole round with
`queue.complete_many` and hands every caller its own outcome, exactly what
`queue.complete` would have returned or raised for it. If the round's
transaction fails as a whole, each of its items is written alone, so each
caller still gets `complete`'s own answer.

    completions = Completions(queue)
    job = await completions.complete(job_id, token, result)
"""

from __future__ import annotations

from typing import Any

import trio

from gormes.actors.job_views import Job
from gormes.errors import StoreError

Item = tuple[str, str, Any]


class _Round:
    __slots__ = ("done", "items", "outcomes")

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.outcomes: list[Any] = []
        self.done = trio.Event()


class Completions:
    def __init__(self, queue: Any) -> None:
        self.queue = queue
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
        if index == 0:
            # The leader writes even if cancelled meanwhile: the others wait on it.
            with trio.CancelScope(shield=True):
                async with self._writing:
                    if self._round is round_:
                        self._round = _Round()
                    await self._write(round_)
        else:
            await round_.done.wait()
        if index >= len(round_.outcomes):
            raise StoreError(f"the completion of job {job_id} was not recorded")
        outcome = round_.outcomes[index]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def _write(self, round_: _Round) -> None:
        try:
            round_.outcomes = list(await self.queue.complete_many(round_.items))
        except Exception:  # noqa: BLE001 - each item gets its own answer below
            round_.outcomes = [await self._alone(item) for item in round_.items]
        finally:
            self.rounds_written += 1
            round_.done.set()

    async def _alone(self, item: Item) -> Any:
        try:
            return await self.queue.complete(*item)
        except Exception as exc:  # noqa: BLE001 - handed to its caller, who raises it
            return exc
