"""`list_runs` (what `gormes runs list` prints): newest first, filtered by status,
job, handler and top level, at most `limit`, on both backends."""

from __future__ import annotations

from pg_helpers import backend, backend_store  # noqa: F401 (fixture)

from gormes.actors.runs.listing import list_runs
from gormes.actors.runs.process import this_process
from gormes.events.runs import RunCancelled, RunCompleted, RunFailed, RunStarted, run_stream


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        self.now += 1  # each event a second after the one before: started_at orders the runs
        return self.now


def started(run_id: str, handler: str = "agent", job_id: str | None = None,
            parent: str | None = None) -> RunStarted:
    return RunStarted(run_id=run_id, handler=handler, handler_version="v", job_id=job_id,
                      parent_run_id=parent, depth=0 if parent is None else 1, process=this_process())


async def test_filters_order_and_limit(backend, db_path) -> None:  # noqa: F811
    async with backend_store(backend, db_path, clock=Clock(1_800_000_000.0)) as store:
        async def record(run_id: str, *events) -> None:
            await store.append(run_stream(run_id), list(events), expected_version=0)

        await record("a", started("a"), RunCompleted(result="ok"))
        await record("b", started("b", job_id="J1"), RunFailed(error="boom"))
        await record("b-child", started("b-child", job_id="J1", parent="b"), RunCancelled(reason="parent failed"))
        await record("c", started("c", handler="custom"))
        await record("d", started("d", job_id="J2"))

        def ids(rows: list[dict]) -> list[str]:
            return [r["run_id"] for r in rows]

        everything = await list_runs(store)
        assert ids(everything) == ["d", "c", "b-child", "b", "a"]  # newest first
        assert [r["process"] for r in everything] == ["alive", "alive", None, None, None]
        assert ids(await list_runs(store, status="failed")) == ["b"]
        assert ids(await list_runs(store, status="running")) == ["d", "c"]
        assert ids(await list_runs(store, job_id="J1")) == ["b-child", "b"]
        assert ids(await list_runs(store, handler="custom")) == ["c"]
        assert ids(await list_runs(store, top_level=True)) == ["d", "c", "b", "a"]
        assert ids(await list_runs(store, job_id="J1", top_level=True)) == ["b"]
        assert ids(await list_runs(store, limit=2)) == ["d", "c"]
        assert await list_runs(store, status="suspended") == []
