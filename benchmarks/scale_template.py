"""The template of `scale.py`'s logs: one unit of a realistic mix, written by the real code.

`build_template(db)` runs, against a fresh SQLite file:

- `gormes demo` (the real CLI): actors appending notes, a parent job with three
  children and a flaky job retried once, an agent run whose coordinator spawns two
  subagents that call real tools through the audited executor (one steered by an
  operator message mid-run), a run of examples/trip.py;
- jobs drained by a real `gormes worker` process: no-op jobs, jobs that fail once
  and succeed on their retry, jobs that fail every attempt until dead;
- memory written through the CLI (entities, a relationship, facts, one of them
  superseding another), each call audited.

`scale_replicate.py` then copies this unit many times with fresh ids.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

HANDLERS = '''
import gormes

_seen = {}


@gormes.job("noop")
async def noop(ctx, data):
    return None


@gormes.job("flaky")
async def flaky(ctx, data):
    _seen[ctx.id] = _seen.get(ctx.id, 0) + 1
    if _seen[ctx.id] == 1:
        raise RuntimeError("transient failure: the first attempt always fails")
    return {"attempt": _seen[ctx.id]}


@gormes.job("broken")
async def broken(ctx, data):
    raise ValueError("this job fails every attempt")
'''

NOOP, FLAKY, BROKEN = 80, 15, 5
AGENT_RUNS, AGENT_TURNS = 2, 12
SCOPE = "project:default"
MEMORY = [
    ("add-entity", "Ada Lovelace", "--kind", "person"),
    ("add-entity", "Analytical Engine", "--kind", "project"),
    ("relate", "Ada Lovelace", "designed programs for", "Analytical Engine"),
    ("add-fact", "Ada Lovelace published the first algorithm for the Analytical Engine in 1843",
     "--subject", "Ada Lovelace"),
    ("add-fact", "The Analytical Engine used punched cards for its programs",
     "--subject", "Analytical Engine"),
    ("add-fact", "the nightly backup of the gormes log runs at 02:00 UTC"),
]
SUPERSEDING = "the nightly backup of the gormes log runs at 03:00 UTC"


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    e["GORMES_DURABILITY"] = "normal"
    return e


def gormes(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "gormes", "--db", str(db), *args]


def cli(db: Path, *args: str) -> str:
    done = subprocess.run(gormes(db, *args), env=env(), cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"gormes {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def _submit_jobs(db: Path) -> int:
    import trio

    from gormes.actors.jobs.queue import JobQueue
    from gormes.events.sqlite import SQLiteEventStore

    no_wait = {"backoff": {"kind": "fixed", "delay_ms": 0, "jitter": 0.0}}
    plan = [("noop", {"max_attempts": 3})] * NOOP
    plan += [("flaky", {"max_attempts": 3, **no_wait})] * FLAKY
    plan += [("broken", {"max_attempts": 2, **no_wait})] * BROKEN

    async def main() -> None:
        async with SQLiteEventStore.open(db) as store:
            queue = await JobQueue.open(store)
            for i, (name, options) in enumerate(plan):
                await queue.submit(name, {"n": i}, options)

    trio.run(main)
    return len(plan)


def _unsettled(db: Path) -> int:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(
            "SELECT count(*) FROM jobs WHERE status IN ('waiting', 'delayed', 'active')"
        ).fetchone()[0]
    finally:
        conn.close()


def _drain(db: Path, handlers: Path) -> None:
    worker = subprocess.Popen(
        gormes(db, "worker", "--import", str(handlers), "--concurrency", "16"),
        env=env(), cwd=REPO, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while _unsettled(db):
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError("the template's worker did not drain its jobs")
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGINT)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def _agent_runs(db: Path) -> None:
    """Runs of the built-in agent loop on a scripted model: each turn calls a tool
    (the clock, a directory listing) through the audited executor."""
    import json

    turns = [
        {"tool_calls": [{"name": "time.now", "arguments": {}}]} if i % 2 else
        {"tool_calls": [{"name": "fs.list", "arguments": {"path": "docs"}}]}
        for i in range(AGENT_TURNS)
    ]
    script = db.with_name("scale_agent.json")
    script.write_text(json.dumps({"model": "scripted",
                                  "agents": [{"replies": [*turns, {"text": "done"}]}]}))
    for i in range(AGENT_RUNS):
        cli(db, "run", "agent", "--prompt", f"look around the docs ({i})", "--model",
            f"scripted:{script}", "--workspace", str(REPO), "--max-iterations", str(AGENT_TURNS + 1))


def build_template(db: Path) -> None:
    """Write one unit of the mix into `db` (a new file) with the real code."""
    cli(db, "demo")
    _agent_runs(db)
    handlers = db.with_name("scale_handlers.py")
    handlers.write_text(HANDLERS)
    _submit_jobs(db)
    _drain(db, handlers)
    for args in MEMORY:
        cli(db, "memory", *args, "--scope", SCOPE)
    conn = sqlite3.connect(db)
    try:
        (fact_id,) = conn.execute(
            "SELECT json_extract(data, '$.fact_id') FROM events"
            " WHERE type = 'memory.fact_recorded' ORDER BY position DESC LIMIT 1"
        ).fetchone()
    finally:
        conn.close()
    cli(db, "memory", "add-fact", SUPERSEDING, "--supersedes", fact_id, "--scope", SCOPE)
