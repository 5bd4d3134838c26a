"""The ported projections (runs, schedules, skill_usage) row by row, a rebuild giving
identical rows, and runners in two processes (two stores on one database) applying
each event exactly once while writers append: on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest
import trio
from projection_helpers import rows
from test_runner import NoteCounter, note

from gormes.actors.cron.scheduler import CronBook, CronScheduler
from gormes.actors.jobs.queue import JobQueue
from gormes.errors import ProjectionError
from gormes.events.cron import CronFired, CronPaused, CronRemoved, CronResumed, CronScheduled
from gormes.events.jobs import Tokens
from gormes.events.runs import (
    RecordedReply,
    RunCancelled,
    RunChildFinished,
    RunCompleted,
    RunFailed,
    RunLlmTurn,
    RunResumed,
    RunStarted,
    RunSuspended,
    RunTokensAdded,
    RunToolCalled,
    run_stream,
)
from gormes.events.skills import SkillFeedback, SkillSelected, skill_stream
from gormes.projections.cron import schedules
from gormes.projections.memory import memory_projection
from gormes.projections.runner import ProjectionRunner
from gormes.projections.runs import runs
from gormes.projections.skill_usage import skill_usage
from gormes.projections.streams import streams

HANG_GUARD = 30  # seconds; only stops a broken test from hanging, never asserted on


def turn(seq: int, inp: int, out: int) -> RunLlmTurn:
    return RunLlmTurn(
        seq=seq, request_hash="h", model="m", message_count=1,
        reply=RecordedReply(content="ok"), usage=Tokens(input=inp, output=out, cache_read=1),
    )


async def rebuilt_identically(store, projection, *tables: str) -> list[list[tuple]]:
    """The tables now, after checking that a rebuild from 0 gives the same rows."""
    live = [await rows(store, f"SELECT * FROM {t} ORDER BY 1") for t in tables]
    await ProjectionRunner(store, projection, batch_size=2).rebuild()
    assert [await rows(store, f"SELECT * FROM {t} ORDER BY 1") for t in tables] == live
    return live


async def test_runs_rows(store):
    await store.append(run_stream("r1"), [
        RunStarted(run_id="r1", handler="agent", handler_version="v1", model="m", job_id="j1"),
        turn(1, 10, 5),
        RunToolCalled(seq=2, operation="fs.read", arguments="{}", args_hash="a", outcome="ok"),
        RunTokensAdded(seq=3, input=1, output=2, cache_read=3),
        RunChildFinished(seq=4, child_run_id="r2", status="completed", tokens=Tokens(input=7)),
        RunCompleted(result="done"),
    ])
    await store.append(run_stream("r2"), [
        RunStarted(run_id="r2", handler="sub", handler_version="v2", parent_run_id="r1", depth=1),
        RunFailed(error="boom"),
    ])
    await store.append(run_stream("r3"), [
        RunStarted(run_id="r3", handler="agent", handler_version="v1"),
        RunSuspended(reason="waiting"),
    ])
    await store.append(run_stream("r4"), [
        RunStarted(run_id="r4", handler="agent", handler_version="v1"),
        RunSuspended(reason="waiting"), RunResumed(replayed_seq=0), RunCancelled(reason="stop"),
    ])
    await ProjectionRunner(store, runs, batch_size=3).catch_up()
    [table] = await rebuilt_identically(store, runs, "runs")
    columns = "run_id, parent_run_id, job_id, handler, status, depth, iterations, " \
        "tokens_input, tokens_output, tokens_cache_read, last_tool, error, finished_at IS NULL"
    assert await rows(store, f"SELECT {columns} FROM runs ORDER BY run_id") == [
        ("r1", None, "j1", "agent", "completed", 0, 1, 18, 7, 4, "fs.read", None, False),
        ("r2", "r1", None, "sub", "failed", 1, 0, 0, 0, 0, None, "boom", False),
        ("r3", None, None, "agent", "suspended", 0, 0, 0, 0, 0, None, None, True),
        ("r4", None, None, "agent", "cancelled", 0, 0, 0, 0, 0, None, "stop", False),
    ]
    assert len(table) == 4

    # A run started again replaces its whole row (INSERT OR REPLACE's meaning).
    await store.append(run_stream("r2"), [
        RunStarted(run_id="r2", handler="sub", handler_version="v3", depth=1),
    ])
    await ProjectionRunner(store, runs).catch_up()
    assert await rows(store, f"SELECT {columns} FROM runs WHERE run_id = 'r2'") == [
        ("r2", None, None, "sub", "running", 1, 0, 0, 0, 0, None, None, True),
    ]
    await rebuilt_identically(store, runs, "runs")


async def test_schedules_rows(store):
    stream = "cron-nightly"
    await store.append(stream, [
        CronScheduled(name="nightly", schedule="0 3 * * *", job="backup", data={"k": 1}, at=100),
        CronFired(fire_at=200, job_id="j1", at=201),
        CronPaused(at=300),
        CronResumed(at=400),
        CronFired(fire_at=500, job_id="j2", at=501),
    ])
    await store.append("cron-gone", [
        CronScheduled(name="gone", schedule="* * * * *", job="x", at=10), CronRemoved(at=20),
    ])
    await store.append("cron-again", [
        CronScheduled(name="again", schedule="* * * * *", job="x", at=10),
        CronFired(fire_at=60, job_id="j0", at=61),
        CronRemoved(at=70),
        CronScheduled(name="again", schedule="5 * * * *", job="y", queue="q", at=80),
    ])
    await ProjectionRunner(store, schedules, batch_size=2).catch_up()
    await rebuilt_identically(store, schedules, "schedules")
    assert await rows(store, "SELECT * FROM schedules ORDER BY name") == [
        ("again", "5 * * * *", "y", "null", "q", "active", 80, 80, 80, None, None, 0),
        ("nightly", "0 3 * * *", "backup", '{"k":1}', "default", "active", 100, 400, 400, 500,
         "j2", 2),
    ]


async def test_skill_usage_rows(store):
    await store.append(run_stream("r1"), [RunStarted(run_id="r1", handler="a", handler_version="v")])
    await store.append(skill_stream("r1"), [
        SkillSelected(run_id="r1", skill="beta", score=1.5, why="w", status="promoted", phrase="p"),
    ])
    await store.append(run_stream("r1"), [RunCompleted()])
    await store.append(run_stream("r2"), [RunFailed(error="x")])
    # A selection recorded after its run ended gets the outcome all the same.
    await store.append(skill_stream("r2"), [
        SkillSelected(run_id="r2", skill="gamma", score=2.0, why="v"),
        SkillFeedback(run_id="r2", skill="gamma", verdict="bad", note="n"),
    ])
    await ProjectionRunner(store, skill_usage, batch_size=2).catch_up()
    await rebuilt_identically(store, skill_usage, "skill_usage", "skill_run_outcomes")
    columns = "skill, run_id, score, why, status, phrase, outcome, feedback, feedback_note"
    assert await rows(store, f"SELECT {columns} FROM skill_usage ORDER BY position") == [
        ("beta", "r1", 1.5, "w", "promoted", "p", "completed", None, None),
        ("gamma", "r2", 2.0, "v", "", None, "failed", "bad", "n"),
    ]
    assert await rows(store, "SELECT * FROM skill_run_outcomes ORDER BY run_id") == [
        ("r1", "completed"), ("r2", "failed"),
    ]


async def test_runners_in_two_processes_apply_each_event_once_under_concurrent_appends(
    store, reopen
):
    appended: list[str] = []

    async def writer(s, w: int) -> None:
        for i in range(25):
            stream = f"w{w}-{i % 3}"
            await s.append(stream, [note(f"{w}.{i}")])
            appended.append(stream)

    async with reopen(store) as other:
        runners = [
            ProjectionRunner(s, p, batch_size=b)
            for s, b in ((store, 3), (other, 5))
            for p in (NoteCounter(), streams)
        ]
        async with trio.open_nursery() as nursery:
            for runner in runners:
                await nursery.start(runner.run)
            async with trio.open_nursery() as writers:
                for w in range(4):
                    writers.start_soon(writer, store if w % 2 else other, w)
            head = await store.head()
            for runner in runners:
                assert await runner.wait(head, timeout=HANG_GUARD)
            nursery.cancel_scope.cancel()
    assert head == 100
    assert dict(await rows(store, "SELECT stream, notes FROM note_counts")) == Counter(appended)
    assert await rows(store, "SELECT sum(version), count(*) FROM streams") == [(100, 12)]
    await rebuilt_identically(store, streams, "streams")


async def test_cron_book_and_scheduler_fire_once(store, reopen):
    minute = datetime(2024, 3, 1, 10, 1, tzinfo=UTC).timestamp()
    now = [minute - 30]
    clock = lambda: now[0]  # noqa: E731
    queue = await JobQueue.open(store, clock=clock)
    book = CronBook(store, clock=clock)
    await book.add("tick", "* * * * *", "echo", {"n": 1})
    [listed] = await book.list()  # read from the schedules projection
    assert (listed.name, listed.status, listed.fires) == ("tick", "active", 0)
    async with reopen(store) as other:
        racing = [
            CronScheduler(queue, clock=clock, scheduler_id="a"),
            CronScheduler(await JobQueue.open(other, clock=clock), clock=clock, scheduler_id="b"),
        ]
        assert [await s.tick() for s in racing] == [[], []]
        now[0] = minute + 1
        results: list = []

        async def tick(s: CronScheduler) -> None:
            results.extend(await s.tick())

        async with trio.open_nursery() as nursery:
            for s in racing:
                nursery.start_soon(tick, s)
    [fired] = results
    [job] = await queue.list(name="echo")
    assert job.id == fired.job_id and job.data == {"n": 1}
    [listed] = await book.list()
    assert (listed.fires, listed.last_job_id) == (1, job.id)
    cron_fired = [r for r in await store.read_stream("cron-tick") if isinstance(r.event, CronFired)]
    assert len(cron_fired) == 1


async def test_memory_runs_on_both(store, backend):
    assert await ProjectionRunner(store, memory_projection).catch_up() == await store.head()


class _SQLiteOnly:
    """A projection without a portable `schema` (none of gormes' own is one now)."""

    name, version, tables, types = "local_only", 1, ("local_only",), None

    def setup(self, db) -> None:
        db.table("local_only").create({"k": str}, pk="k", if_not_exists=True)

    def apply(self, conn, records) -> None:
        pass


async def test_a_projection_without_a_schema_is_refused_on_postgres_only(store, backend):
    if backend == "sqlite":
        await ProjectionRunner(store, _SQLiteOnly()).catch_up()
        return
    with pytest.raises(ProjectionError, match="'local_only' runs on SQLite only"):
        ProjectionRunner(store, _SQLiteOnly())
