"""Agent steps recorded per second against DBOS, and replay speed against a raw read.

    .venv/bin/python benchmarks/agents.py      # one JSON line on stdout

1. gormes: 100 concurrent runs of the built-in agent loop on the scripted
   provider (a script of replies, not a model), each making 20 model turns that
   ask for a tool (`time.now`, through the real ops executor with its audit) and a
   final turn: 41 recorded steps per run (model turns + tool calls), every one an
   event appended durably (synchronous=FULL) before the agent sees it.
2. DBOS (the `dbos` package, an SQLite system database) runs the same loop as a
   workflow: one `@DBOS.step` per model turn and per tool call (41 per workflow),
   100 workflows started at once. Its steps do trivial work (no provider, no
   executor), which favours DBOS.
3. Replay: one run of 10,000 events (a handler alternating a model turn and a
   tool call) is replayed from the database (read, decode, serve, check every
   request hash and argument hash); compared with a raw sqlite3 read of the same
   rows (`SELECT ... WHERE stream = ? ORDER BY version`, fetchall). Each side runs
   once untimed first (the process's first replay builds the operation registry and
   warms caches; the first read warms the page cache), then REPEATS times; medians.

Keys: gormes_steps_per_s, dbos_steps_per_s, vs_dbos, replay_eps, raw_read_eps,
replay_vs_raw. DBOS is optional: without it the dbos keys are null.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import median, progress, report, scratch_dir
from gormes.providers.base import Message, ModelRequest
from gormes.actors.runs.replay import replay
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.context import RunContext, run_handler
from gormes.actors.runs.manager import RunManager
from gormes.events.catalog import load_all
from gormes.events.runs import run_stream
from gormes.events.sqlite import SQLiteEventStore
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor

RUNS = 100
TURNS = 20  # model turns that call a tool, then one final turn
STEPS_PER_RUN = TURNS * 2 + 1
REPLAY_EVENTS = 10_000
REPEATS = 5


def write_script(path: Path, replies: list[dict[str, Any]]) -> str:
    path.write_text(json.dumps({"model": "scripted", "agents": [{"replies": replies}]}))
    return f"scripted:{path}"


# -- gormes ------------------------------------------------------------------------


async def gormes_agents(tmp: Path) -> float:
    turn = {"tool_calls": [{"name": "time.now", "arguments": {}}]}
    model = write_script(tmp / "agents.json", [turn] * TURNS + [{"text": "done"}])
    async with SQLiteEventStore.open(tmp / "agents.db") as store:
        executor = Executor(default_registry(), store)
        async with RunManager.open(store, executor=executor) as runs:
            started = time.perf_counter()
            handles = [
                await runs.start("agent", {"prompt": f"run {i}"}, model=model, max_iterations=TURNS + 1)
                for i in range(RUNS)
            ]
            outcomes = [await h.outcome() for h in handles]
            elapsed = time.perf_counter() - started
        steps = len(await store.read_all(types=["run.llm_turn", "run.tool_called"]))
    failed = [o for o in outcomes if o.status != "completed"]
    if failed or steps != RUNS * STEPS_PER_RUN:
        raise SystemExit(f"gormes runs did not all complete ({failed[:1]}, {steps} steps)")
    return steps / elapsed


# -- DBOS --------------------------------------------------------------------------


def dbos_agents(tmp: Path) -> float | None:
    try:
        from dbos import DBOS
    except ImportError:
        progress("dbos is not installed: skipping the comparison")
        return None
    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(config={"name": "gormes-bench", "system_database_url": f"sqlite:///{tmp / 'dbos.sqlite'}",
                 "log_level": "WARNING"})

    @DBOS.step()
    def model_turn(run: int, turn: int) -> dict[str, Any]:
        if turn < TURNS:
            return {"tool_calls": [{"name": "time.now", "arguments": {}}]}
        return {"text": "done"}

    @DBOS.step()
    def tool_call(run: int, turn: int) -> dict[str, Any]:
        return {"now": time.time()}

    @DBOS.workflow()
    def agent(run: int) -> int:
        steps = 0
        for turn in range(TURNS + 1):
            reply = model_turn(run, turn)
            steps += 1
            if "tool_calls" in reply:
                tool_call(run, turn)
                steps += 1
        return steps

    DBOS.launch()
    try:
        started = time.perf_counter()
        handles = [DBOS.start_workflow(agent, i) for i in range(RUNS)]
        steps = sum(h.get_result() for h in handles)
        elapsed = time.perf_counter() - started
    finally:
        DBOS.destroy()
    return steps / elapsed


# -- replay against a raw read -----------------------------------------------------


@run_handler("bench.steps")
async def bench_steps(ctx: RunContext, input: Any) -> int:
    """A model turn and a tool call, `input` times, on a short conversation."""
    for i in range(input):
        await ctx.llm(ModelRequest(model=ctx.model_name, messages=(Message(role="user", content=f"step {i}"),)))
        await ctx.tool("time.now", {})
    return input


async def record_long_run(tmp: Path) -> tuple[Path, str, int]:
    db = tmp / "replay.db"
    model = write_script(tmp / "long.json", [{"text": "ok"}])
    iterations = (REPLAY_EVENTS - 2) // 2
    async with SQLiteEventStore.open(db, durability="normal") as store:
        async with RunManager.open(store, executor=Executor(default_registry(), store)) as runs:
            outcome = await runs.run("bench.steps", iterations, model=model)
        events = len(await store.read_stream(run_stream(outcome.run_id)))
    assert outcome.status == "completed", outcome.error
    return db, outcome.run_id, events


async def replay_once(db: Path, run_id: str) -> float:
    registry = default_registry()  # the run's tool schemas: built before the clock starts
    started = time.perf_counter()
    with DatabaseRuns(db) as source:
        result = await replay(source, run_id, registry=registry)
    elapsed = time.perf_counter() - started
    if not result.tree_exact:
        raise SystemExit(f"the long run did not replay exactly: {result.first_divergence}")
    return elapsed


def raw_read_once(db: Path, run_id: str) -> tuple[float, int]:
    started = time.perf_counter()
    conn = sqlite3.connect(db)
    rows = conn.execute(
        "SELECT position, stream, version, type, type_version, data, recorded_at FROM events "
        "WHERE stream = ? ORDER BY version", (run_stream(run_id),),
    ).fetchall()
    conn.close()
    return time.perf_counter() - started, len(rows)


def main() -> None:
    load_all()
    with scratch_dir() as tmp:
        progress(f"gormes: {RUNS} concurrent agent runs of {STEPS_PER_RUN} steps")
        gormes_rate = trio.run(gormes_agents, tmp)
        progress(f"dbos: {RUNS} concurrent workflows of {STEPS_PER_RUN} steps")
        dbos_rate = dbos_agents(tmp)
        progress(f"replay: recording a run of {REPLAY_EVENTS} events")
        db, run_id, events = trio.run(record_long_run, tmp)
        trio.run(replay_once, db, run_id)  # warm-up, untimed
        raw_read_once(db, run_id)
        replay_s = median([trio.run(replay_once, db, run_id) for _ in range(REPEATS)])
        raw = [raw_read_once(db, run_id) for _ in range(REPEATS)]
        raw_s = median([s for s, _ in raw])
        assert all(n == events for _, n in raw)
    report({
        "gormes_steps_per_s": round(gormes_rate),
        "dbos_steps_per_s": None if dbos_rate is None else round(dbos_rate),
        "vs_dbos": None if dbos_rate is None else round(gormes_rate / dbos_rate, 2),
        "replay_eps": round(events / replay_s),
        "raw_read_eps": round(events / raw_s),
        "replay_vs_raw": round(raw_s / replay_s, 3),
        "runs": RUNS,
        "steps_per_run": STEPS_PER_RUN,
        "replay_events": events,
    })


if __name__ == "__main__":
    main()
