"""`resume_from_outside` on both backends: a cancelled foreground run continues as
a new run whose recorded steps are replayed (its random draw comes back from the
record); `resumed_by` finds that continuation, so a second resume is refused."""

from __future__ import annotations

import pytest
import trio
from pg_helpers import backend, backend_store  # noqa: F401 (fixture)
from run_helpers import run_events, wait_until

from gormes.actors.runs.continuation import ResumeRefused
from gormes.actors.runs.resume import resume_from_outside, resumed_by
from gormes.actors.runs.context import RunHandlerRegistry, run_handler
from gormes.actors.runs.manager import RunManager
from gormes.events.runs import RunCancelled, RunStarted

handlers = RunHandlerRegistry()
release = {"go": False}


@run_handler("two_steps", registry=handlers)
async def two_steps(ctx, input):
    first = await ctx.random()
    while not release["go"]:
        await trio.sleep(0.01)
    second = await ctx.now()
    return {"first": first, "second": second > 0}


async def test_a_cancelled_run_resumes_once(backend, db_path) -> None:  # noqa: F811
    release["go"] = False
    async with backend_store(backend, db_path) as store:
        async with RunManager.open(store, handlers=handlers) as runs:
            handle = await runs.start("two_steps", None)

            async def drew() -> bool:
                return len(await run_events(store, handle.run_id)) >= 2

            await wait_until(drew)
            handle.cancel("interrupted by SIGINT")
            old = await handle.outcome()
            assert old.status == "cancelled"
            drawn = (await run_events(store, old.run_id))[1].value

            release["go"] = True
            started: list[str] = []
            resumed = await resume_from_outside(runs, old.run_id, on_start=started.append)
            assert resumed.outcome.status == "completed"
            assert started == [resumed.run_id] and resumed.copied == 1
            assert resumed.outcome.result == {"first": drawn, "second": True}  # the draw replayed
            first_event = (await run_events(store, resumed.run_id))[0]
            assert isinstance(first_event, RunStarted) and first_event.resumed_from.run_id == old.run_id
            assert await resumed_by(store, old.run_id) == resumed.run_id
            assert await resumed_by(store, resumed.run_id) is None
            with pytest.raises(ResumeRefused, match="already resumed"):
                await resume_from_outside(runs, old.run_id)
            assert isinstance((await run_events(store, old.run_id))[-1], RunCancelled)
